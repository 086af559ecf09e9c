"""Inside the networks (``hmmtf analyze``, ``docs/analysis.md``): the paper's three empirical
claims about a trained RoFormer -- shuffle test (Figure 2), layer-wise probes (Figure 3a/3b),
attention maps (Figure 7) -- measured on the trained network, a random-init twin (the chance
baseline) and the hand-built network of :mod:`construction`; and causal evidence, activation
patching against exact HMM counterfactuals.

Public API (import from the modules named; this file imports nothing)::

    shuffle:   random_derangements, shuffle_demonstrations, shuffle_pairs, shuffle_change
               (the metric per prompt, layer and head), ScoresFunction
    probes:    probe_positions, probe_targets, probe_accuracy -> ProbeResult (L-BFGS logistic
               probe, prompt-level bootstrap interval), bootstrap_interval, bootstrap_ratio_interval,
               check_distance
    offsets:   offset_profile, composed_history_attention, profile_similarity,
               best_matching_heads
    networks:  what the analyses read from a RoFormer (roformer_streams, roformer_scores,
               roformer_patterns, roformer_offset_profiles) and from the hand-built network
               (hand_built_network, hand_built_trace, hand_built_streams, hand_built_scores,
               hand_built_weights, hand_built_composed_history)
    patching:  activation patching against exact HMM counterfactuals: state_forcing (state
               centroids patched into the RoFormer, four controls), history_patching (the token
               r back changed, both networks), patched_next_token, kl_divergence,
               recovered_fraction, check_prompt_position
    claims:    the decision rules of the three claims on the computed sections: locality_order
               (claim 1), decoding_order and first_layer_at_ceiling (claim 2), peak_interval and
               previous_token_rules (claim 3), claims_summary (all three, as ``hmmtf ladder`` reads them)
    report:    AnalysisConfig, analyze(model, preset, config, device) -> Analysis: the sections
               of ``analysis.json`` and the attention maps of its figures; patching_report (the
               patching section alone, as ``hmmtf reproduce``'s patching stage runs it)
    figures:   the six figures of the shuffle, probe and attention sections
    patching_figures: the two figures of the patching section
    commands:  ``hmmtf analyze``
"""
