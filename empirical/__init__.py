"""A RoFormer trained on the paper's mixture of HMMs and measured against the Bayes-optimal
predictor (``docs/empirical.md``), in packages by concern (``docs/ARCHITECTURE.md``: the layers
and which imports which): :mod:`empirical.training`, :mod:`empirical.yardsticks`,
:mod:`empirical.analysis` (inside the networks), :mod:`empirical.studies` (the regime ladder and
unigram traps on Markov chains), :mod:`empirical.measurement`, :mod:`empirical.interop`,
:mod:`empirical.reports` (the typed reports and figures the commands write), :mod:`empirical.provenance`
and :mod:`empirical.reproduce`. Their command line is the package :mod:`hmmtf`.

Public API of the core (import from the modules named; this file imports nothing)::

    training.model:       RoFormerConfig, RoFormer (.forward, .run_with_cache -> logits, cache under
                 HOOK_NAMES; both take patches=[ResidualPatch(layer, position, vector, mode)]),
                 rotary_cos_sin, apply_rotary, forward_flops_per_token, training_flops_per_token
    training.train:       TrainConfig, Batch, IGNORE_INDEX,
                 train(model_config, train_config, batch_fn, run_dir, stop_requested=...) ->
                 TrainResult (DDP under torchrun, bit-exact resume, locked run folder),
                 init_distributed, distributed_context
    training.checkpoint:  save_checkpoint, load_checkpoint -> Checkpoint(model, config, optimizer_state)
    training.runs:        load_run(path, num_prompts) -> LoadedRun(model, preset, mixture, prompts, config,
                 checkpoint; .prompt_format): a checkpoint or run folder with the data it was trained on
    training.data:        PromptStream (batch function of a mixture), held_out_prompts,
                 unigram_distribution, stream_seed
    yardsticks.evaluate:    hmm_token_probs, model_predictor, bayes_predictor, unigram_predictor, in_context_predictors,
                 evaluate_predictors (pairs=: paired per-prompt loss differences) -> Evaluation
                 (Metrics, GapReport, DemonstrationCurve, PositionCurve, LossDifference)
    yardsticks.regime:      the regime diagnostic: unseen_mixture, shared_hmms, oracle_predictor,
                 memorisation_verdict, regime_section -> RegimeSection (``hmmtf evaluate``'s ``regime``)
    training.overrides:   resolve(preset, *overrides) -> TrainingRun (preset, model, changes,
                 .default_run_dir), read_config_file, training_run (``hmmtf train``'s values)
    training.run_control: run_folder_lock(run_dir), stop_on_signals() -> StopRequest (SIGINT/SIGTERM)
    training.presets:     get_preset(name) -> ExperimentPreset (.model_config, .build_mixture, .task),
                 preset_from_task, PRESETS (the one registry, with the regime ladder's
                 tasks-N-small/deep: LADDER_TASK_COUNTS, LADDER_MODELS, ladder_preset_name)
    yardsticks.calibrate:   calibrate(preset, concentrations, num_prompts, seed)
    yardsticks.signal:      family_signal, signal_report, CANDIDATES (``hmmtf signal``: the in-context signal of
                 data families on fresh HMMs: n-grams, the prior-predictive ceiling, the oracle, gamma)
    yardsticks.curves:      train_with_curve(preset, model_config, run_dir, every, ...) -> points, curve_point,
                 build_probe, run_summary (``hmmtf curve`` / ``hmmtf curves``: learning curves on fresh HMMs)
    training.configs:     JSONConfig, check_integers, option
    reports.plots:   plot_in_context, plot_regime, plot_training_loss, plot_calibration, plot_competence,
                 plot_signal, plot_curve, plot_curves
    studies.ladder:      point_statistics, collect_points, ladder_table (``hmmtf ladder``); its figures
                 in ladder_figures
    measurement.roofline:    matmul_peak, read_bandwidth, timed, synchronize (the machine's rates)
    measurement.throughput:  layouts, measure_layout, measure_peaks, ratio_summary (benchmarks/bench_training.py --compare)
    training.allocator:   TRAINING_TUNABLES, with_training_tunables, restart_with_training_tunables (glibc malloc)
    reports.evaluation: EvaluationReport, SideBySideReport, CompetenceReport, Provenance (what
                 ``hmmtf evaluate`` writes, typed)

``empirical.reproduce`` (``hmmtf reproduce``) runs the paper preset end to end on top of these.
"""
