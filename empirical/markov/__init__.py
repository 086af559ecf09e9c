"""The unigram trap of "Attention with Markov" (Makkuva et al., arXiv 2402.04161), measured on the
project's RoFormer (:mod:`empirical.model`) trained by the project's loop (:mod:`empirical.train`);
formulas and results in ``docs/markov.md``.

A sweep trains, for every binary chain ``(p, q)`` of a grid (minus the i.i.d. cells ``p + q = 1``,
where the bigram and unigram lines coincide), every architecture of ``config.ARCHITECTURES`` and
every seed, a fresh model by next-token prediction on fresh stationary sequences of that chain,
then measures where the run ended on held-out sequences (trap criterion, read-back kernel,
attention scores, the step at which it left the unigram plateau).

Public API (import from the modules named; this file imports nothing)::

    chains:     binary_kernel, check_kernel, stationary_distribution, reference_losses
                (bigram = entropy rate, unigram = stationary entropy), bigram_loss_variance,
                sample_sequences, sequence_log_losses, excess_losses, read_back_kernel
                (-> KernelReadBack(mean, spread)), memory_norm, memory_coordinate, is_memoryless,
                surprise (-log p, 0 at p = 0)
    config:     MarkovSweepConfig (grid, model, optimiser; .model_config(arch),
                .train_config(seed), .cells(), .iid_cells()), ARCHITECTURES
    runs:       MarkovStream (the batch function), held_out_sequences,
                train_and_evaluate(config, arch, p, q, seed) -> run record, run_sweep(config)
    criterion:  TRAP_THRESHOLD, reference_lines (of a binary chain), unigram_bigram_gap,
                relative_excess, is_trapped, summarise_predictions, escape_step
    attention:  induction_targets, attention_scores
    aggregate:  aggregate_cells(runs) -> per-cell records, median_escape_step, plateau_survival
    figures:    plot_phase_diagram, plot_loss_curves, plot_plateau_survival, loss_curve_cells
    commands:   write_sweep(runs, config, directory, command=..., wall_seconds=...),
                ``hmmtf markov-sweep``
"""
