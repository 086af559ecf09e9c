"""``hmmtf reproduce``: the paper's experiment (arXiv 2506.01919, Section 2 and Appendix B) in one
command, sized for a GPU lent for 15 minutes in calls of at most 10 and rehearsed on a CPU
(``docs/reproduce.md``).

Public API (import from the modules named; this file imports nothing)::

    config:    ReproduceConfig, reproduce_config(preset, device, compile_model, cpu_bf16),
               ANALYSIS_CONFIGS, VERDICT_SETTINGS, check_device
    plan:      Rates, measure_rates, assumed_rates, HostTimings, measure_host, StageCost (with the
               caps it is costed at) and one cost function per stage, bayes_flops, evaluate_work,
               ngram_verdict_work,
               Budget, stages_to_run, split_into_calls, check_budget, format_plan
    stages:    STAGES (mixture, train, evaluate, ngram-verdict for paper-cpu only, analyze, patching,
               bundle), preset_stages(preset), run_stages(config, out, ...)
    record:    record.json / progress.json, read_status, environment, git_state
    bundle:    write_bundle (checked against BUNDLE_LIMIT_BYTES), bundled_files
    commands:  ``hmmtf reproduce``
"""
