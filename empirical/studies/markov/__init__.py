"""The unigram trap of "Attention with Markov" (Makkuva et al., arXiv 2402.04161), measured on the
project's RoFormer (:mod:`empirical.training.model`) trained by the project's loop (:mod:`empirical.training.train`);
formulas and results in ``docs/markov.md``.

A sweep trains, for every binary chain ``(p, q)`` of a grid (minus the i.i.d. cells ``p + q = 1``,
where the bigram and unigram lines coincide), every arm (an initialisation of ``inits.INITS`` x an
architecture of ``config.ARCHITECTURES``) and every seed, a model by next-token prediction on
fresh stationary sequences of that chain, then measures where the run ended on held-out sequences
(decision rule, read-back kernel, attention scores, the step at which it left the unigram plateau).

Public API (import from the modules named; this file imports nothing)::

    chains:     binary_kernel, check_kernel, stationary_distribution, reference_losses
                (bigram = entropy rate, unigram = stationary entropy), bigram_loss_variance,
                sample_sequences, sequence_log_losses, excess_losses, read_back_kernel
                (-> KernelReadBack(mean, spread)), memory_norm, memory_coordinate, is_memoryless,
                surprise (-log p, 0 at p = 0)
    inits:      INITS, check_init, initial_model(model_config, init, rank, seed), apply_low_rank,
                orthonormal_columns, rank_k_matrix, gaussian_norm
    config:     MarkovSweepConfig (grid, arms, model, optimiser; .arms(), .model_config(arch),
                .train_config(seed), .cells(), .iid_cells()), ARCHITECTURES
    runs:       MarkovStream (the batch function), held_out_sequences, write_initial_checkpoint,
                train_and_evaluate(config, init, arch, p, q, seed) -> run record, run_sweep(config)
    criterion:  TRAP_Z, trap_tolerance, is_trapped (the decision rule), reference_lines (of a
                binary chain), unigram_bigram_gap, relative_excess, summarise_predictions, escape_step
    attention:  induction_targets, attention_scores
    aggregate:  wilson_interval, count_record, aggregate_cells, aggregate_sides (per side of
                p + q = 1), plateau_survival (Kaplan-Meier under censoring at the budget),
                median_escape_step, escape_record, hardest_cell, verdict_counts (per arm: both
                sides, the hardest cell, escape steps)
    figures:    plot_phase_diagram, plot_read_back, plot_plateau_survival, plot_loss_curves
    commands:   write_sweep(runs, config, directory, command=..., wall_seconds=...), draw_figures
                (from a results.json), verdict_markdown (the tables of docs/markov.md),
                source_revision, ``hmmtf markov-sweep`` (``--redraw``), ``hmmtf markov-verdict``
"""
