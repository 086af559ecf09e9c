"""What ``hmmtf analyze`` measures inside a trained RoFormer and beside it the hand-built network,
as the sections of ``analysis.json``: the shuffle test (Figure 2), layer-wise probes (Figure
3a/3b) with a randomly initialised network of the same shape as chance baseline, relative-offset
attention profiles matched against the hand-built history layers, and the numbers behind the
three verdicts of ``docs/analysis.md``, and activation patching against exact HMM
counterfactuals. Definitions are in the docstrings of ``empirical.analysis.shuffle``,
``.probes``, ``.offsets`` and ``.patching``, and in ``docs/analysis.md``.

Prompts: every set comes from its own seed ``stream_seed(data_seed, stream, 0)`` with streams
:data:`PROBE_TRAIN_STREAM`, :data:`PROBE_TEST_STREAM`, :data:`SHUFFLE_STREAM`,
:data:`PATCHING_STREAM`, :data:`CENTROID_STREAM`, none of which training (stream 0) or
``hmmtf evaluate`` (1, 2) uses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from tqdm import tqdm

import construction
import hmm
from empirical.analysis.claims import claims_summary
from empirical.analysis.networks import (
    HAND_BUILT_STEPS,
    hand_built_composed_history,
    hand_built_scores,
    hand_built_streams,
    hand_built_trace,
    hand_built_weights,
    roformer_offset_profiles,
    roformer_offset_summary,
    roformer_patterns,
    roformer_scores,
    roformer_streams,
)
from empirical.analysis.offsets import best_matching_heads, offset_profile
from empirical.analysis.patching import check_threshold, history_patching, state_forcing
from empirical.analysis.probes import decoding_ceilings, probe_accuracy, probe_positions, probe_targets
from empirical.analysis.shuffle import ScoresFunction, random_derangements, shuffle_change
from empirical.training.configs import check_integers, option
from empirical.training.data import stream_seed
from empirical.training.model import RoFormer
from empirical.training.presets import ExperimentPreset

PROBE_TRAIN_STREAM = 3
PROBE_TEST_STREAM = 4
SHUFFLE_STREAM = 5
PATCHING_STREAM = 6
CENTROID_STREAM = 7

SECTIONS = ("shuffle", "probes", "offsets", "patching")
"""The sections of ``analysis.json`` that ``hmmtf analyze --sections`` can choose (``offsets``
includes the attention maps; ``claims`` needs ``shuffle`` and ``probes``)."""


@dataclass(frozen=True)
class AnalysisConfig:
    """How much ``hmmtf analyze`` measures; validated on construction (``max_distance`` >= 1 and
    ``max_offset`` >= 0 here, both against the prompt format where they are used)."""

    batch_size: int = option(64, "prompts per forward pass")
    probe_train_prompts: int = option(512, "prompts the probes are trained on")
    probe_test_prompts: int = option(256, "prompts the probes are tested on")
    shuffle_prompts: int = option(256, "prompts of the shuffle test")
    hand_built_prompts: int = option(48, "probe-training prompts of the hand-built network (half as many to test, "
                                         "shuffle and patch)")
    max_distance: int = option(5, "largest k of the o_{t-k} probes and r of history patching")
    max_offset: int = option(8, "offsets 0..-max of the attention profiles")
    seed: int = option(0, "random-init network, shuffles and patching draws")
    sections: tuple[str, ...] = option(SECTIONS, "which analyses to run", choices=SECTIONS)
    centroid_prompts: int = option(512, "prompts whose residual streams give the state centroids")
    patching_prompts: int = option(256, "prompts patched by state forcing and the trained network's history patching")
    max_forcing_items: int = option(2048, "most state-forcing items patched, drawn uniformly from those found when "
                                          "there are more (each costs 1 + 5 L passes of its prompt)")
    state_threshold: float = option(0.9, "least filtered posterior P(s_t | o_1..o_t, task) of the state a test "
                                         "position is labelled with")
    probe_tasks: int = option(0, "draw the probe prompts from the first N tasks of the mixture only (0: all "
                                 "tasks); a task-id probe can only name tasks it was trained on")

    def __post_init__(self) -> None:
        check_integers(self, ("batch_size", "probe_train_prompts", "probe_test_prompts", "shuffle_prompts",
                              "hand_built_prompts", "centroid_prompts", "patching_prompts", "max_forcing_items"),
                       minimum=1)
        check_integers(self, ("seed", "probe_tasks", "max_offset"), minimum=0)
        check_integers(self, ("max_distance",), minimum=1)
        check_threshold(self.state_threshold)
        unknown = [name for name in self.sections if name not in SECTIONS]
        if not self.sections or unknown or len(set(self.sections)) < len(self.sections):
            raise ValueError(f"sections: {self.sections!r}; expected distinct names among {SECTIONS}")

    @property
    def hand_built_counts(self) -> tuple[int, int]:
        """Prompts of the hand-built network: ``(probe training, probe test)``; it shuffles as many
        as it tests."""
        return self.hand_built_prompts, max(self.hand_built_prompts // 2, 1)


def random_init_like(model: RoFormer, seed: int) -> RoFormer:
    """A RoFormer of the same config with fresh initial weights drawn after
    ``torch.manual_seed(seed)`` (the caller's random state is restored afterwards)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return RoFormer(model.config)


def summarise_shuffle(changes: dict[str, torch.Tensor]) -> dict[str, dict]:
    """Per layer: the head-averaged metric of each prompt (``per_prompt``, NaN where its logits had
    no spread), summarised over prompts (mean, std, quartiles, number of prompts), and the
    per-head means over prompts."""
    summary = {}
    for layer, values in changes.items():
        per_prompt = values.nanmean(dim=1)
        quartiles = torch.nanquantile(per_prompt, torch.tensor([0.25, 0.5, 0.75], dtype=per_prompt.dtype))
        summary[layer] = {
            "mean": float(per_prompt.nanmean()),
            "std": float(per_prompt[~per_prompt.isnan()].std()),
            "quartiles": quartiles.tolist(),
            "prompts": int((~per_prompt.isnan()).sum()),
            "per_head_mean": values.nanmean(dim=0).tolist(),
            "per_prompt": per_prompt.tolist(),
        }
    return summary


def shuffle_section(scores: ScoresFunction, tokens: torch.Tensor, prompt_format: hmm.PromptFormat, seed: int,
                    batch_size: int, min_contexts: tuple[int, ...], description: str) -> dict[str, dict[str, dict]]:
    """:func:`shuffle_change` over ``tokens`` in batches, one derangement per prompt, summarised:
    ``{"min_context=c": {layer: summary}}``."""
    orders = random_derangements(len(tokens), prompt_format.num_demos, torch.Generator().manual_seed(seed))
    parts: dict[int, dict[str, list[torch.Tensor]]] = {c: {} for c in min_contexts}
    for batch, batch_orders in tqdm(list(zip(tokens.split(batch_size), orders.split(batch_size))),
                                    desc=description, unit="batch", leave=False):
        for min_context, layers in shuffle_change(scores, batch, prompt_format, batch_orders, min_contexts).items():
            for layer, values in layers.items():
                parts[min_context].setdefault(layer, []).append(values)
    return {f"min_context={c}": summarise_shuffle({layer: torch.cat(values) for layer, values in layers.items()})
            for c, layers in parts.items()}


def probe_section(train_streams: dict[str, torch.Tensor], test_streams: dict[str, torch.Tensor],
                  train_targets: dict[str, torch.Tensor], test_targets: dict[str, torch.Tensor],
                  test_groups: torch.Tensor, device: torch.device, description: str) -> dict[str, dict[str, dict]]:
    """``{target: {stream name: ProbeResult as dict}}`` for every target and every stream (fits on
    ``device``)."""
    results: dict[str, dict[str, dict]] = {target: {} for target in train_targets}
    jobs = [(target, name) for target in train_targets for name in train_streams]
    for target, name in tqdm(jobs, desc=description, unit="probe", leave=False):
        result = probe_accuracy(train_streams[name], train_targets[target], test_streams[name],
                                test_targets[target], test_groups, device)
        results[target][name] = result._asdict()
    return results


def hand_built_profiles(trace: construction.Trace, query_positions: torch.Tensor,
                        max_offset: int) -> dict[str, dict[str, torch.Tensor]]:
    """Offset profiles of the hand-built history and label layers: ``direct`` (each layer's own
    attention) and ``composed`` (history layers: :func:`hand_built_composed_history`)."""
    weights = hand_built_weights(trace)
    composed = hand_built_composed_history(trace)
    direct = {name: offset_profile(weights[name][:1], query_positions, max_offset)[0]
              for name in [*composed, "label"]}
    composed_profiles = {name: offset_profile(matrix[None], query_positions, max_offset)[0]
                         for name, matrix in composed.items()}
    return {"direct": direct, "composed": composed_profiles}


def shuffle_report(networks: dict[str, RoFormer], hand_built_tokens: torch.Tensor, tokens: torch.Tensor,
                   prompt_format: hmm.PromptFormat, num_tokens: int, config: AnalysisConfig,
                   device: torch.device) -> dict:
    """:func:`shuffle_section` of both RoFormers on ``tokens`` and of the hand-built network on
    ``hand_built_tokens``, for all pairs and for pairs with ``max_distance`` tokens of context."""
    min_contexts = (0, config.max_distance)
    report = {name: shuffle_section(roformer_scores(model, device), tokens, prompt_format, config.seed,
                                    config.batch_size, min_contexts, f"shuffle {name}")
              for name, model in networks.items()}
    report["hand-built"] = shuffle_section(hand_built_scores(num_tokens, config.max_distance), hand_built_tokens,
                                           prompt_format, config.seed, config.batch_size, min_contexts,
                                           "shuffle hand-built")
    return report


def probe_report(networks: dict[str, RoFormer], train_prompts: hmm.Prompts, test_prompts: hmm.Prompts,
                 mixture: hmm.Mixture, config: AnalysisConfig, device: torch.device) -> dict:
    """:func:`probe_section` of both RoFormers, and of the hand-built network on the first
    ``config.hand_built_counts = (train, test)`` prompts of each set; ``ceiling``: the
    Bayes-optimal decoders on the test prompts (:func:`decoding_ceilings`)."""
    num_tokens = mixture.num_tokens
    positions = probe_positions(train_prompts.format, config.max_distance)
    per_prompt = int(positions.sum())
    train_targets = probe_targets(train_prompts, config.max_distance)
    test_targets = probe_targets(test_prompts, config.max_distance)
    groups = torch.arange(len(test_prompts.tokens)).repeat_interleave(per_prompt)
    report = {}
    for name, model in networks.items():
        report[name] = probe_section(
            roformer_streams(model, train_prompts.tokens, positions, device, config.batch_size, f"streams {name}"),
            roformer_streams(model, test_prompts.tokens, positions, device, config.batch_size, f"streams {name}"),
            train_targets, test_targets, groups, device, f"probes {name}")
    hand_train, hand_test = config.hand_built_counts
    report["hand-built"] = probe_section(
        hand_built_streams(train_prompts.tokens[:hand_train], positions, num_tokens, config.max_distance,
                           "streams hand-built"),
        hand_built_streams(test_prompts.tokens[:hand_test], positions, num_tokens, config.max_distance,
                           "streams hand-built"),
        {key: value[: hand_train * per_prompt] for key, value in train_targets.items()},
        {key: value[: hand_test * per_prompt] for key, value in test_targets.items()},
        groups[: hand_test * per_prompt], device, "probes hand-built")
    report["ceiling"] = decoding_ceilings(mixture, test_prompts, config.max_distance)
    return report


def summary_max_offset(prompt_format: hmm.PromptFormat) -> int:
    """Offsets ``0..-K`` of the offset summary: two segments back, ``K = 2 (demo_length + 1)``,
    far enough to show attention that follows the segments (its queries have K earlier positions)."""
    return 2 * (prompt_format.demo_length + 1)


def offset_report(networks: dict[str, RoFormer], tokens: torch.Tensor, hand_built_example: construction.Trace,
                  prompt_format: hmm.PromptFormat, config: AnalysisConfig, device: torch.device) -> dict:
    """Offset profiles of every RoFormer head over ``tokens`` (non-delimiter queries with
    ``max_offset`` earlier positions), of the hand-built layers on one prompt (they depend on
    positions only), each hand-built history layer's best-matching head of the trained and of the
    random-init network, and the trained heads' mean attention and logit at offsets
    ``0..-summary_max_offset`` (queries with that many earlier positions)."""
    query_positions = ~prompt_format.is_delimiter & (torch.arange(prompt_format.length) >= config.max_offset)
    profiles = {name: roformer_offset_profiles(model, tokens, query_positions, config.max_offset, device,
                                               config.batch_size, f"offsets {name}")
                for name, model in networks.items()}
    hand_profiles = hand_built_profiles(hand_built_example, query_positions, config.max_offset)
    return {
        "offsets": [-offset for offset in range(config.max_offset + 1)] + ["other"],
        **{name: profile.tolist() for name, profile in profiles.items()},
        "hand-built": {kind: {name: profile.tolist() for name, profile in by_layer.items()}
                       for kind, by_layer in hand_profiles.items()},
        "best_match_composed": best_matching_heads(hand_profiles["composed"], profiles["trained"]),
        "best_match_composed_random_init": best_matching_heads(hand_profiles["composed"], profiles["random-init"]),
        # The label layer attends ahead, which a causal head cannot: only history layers are matched.
        "best_match_direct": best_matching_heads(
            {name: hand_profiles["direct"][name] for name in hand_built_example.layers_of(construction.Stage.HISTORY)},
            profiles["trained"]),
        "summary": offset_summary_section(networks["trained"], tokens, prompt_format, config, device),
    }


def patching_report(model: RoFormer, preset: ExperimentPreset, mixture: hmm.Mixture, config: AnalysisConfig,
                    device: torch.device) -> dict:
    """State forcing of the trained network and history patching of both networks
    (:mod:`empirical.analysis.patching`) on ``config.patching_prompts`` prompts (stream
    :data:`PATCHING_STREAM`), the centroids from ``config.centroid_prompts`` (stream
    :data:`CENTROID_STREAM`), both drawn from the probed tasks (:func:`probe_mixture`: centroids
    are per task, so each task needs several prompts), at most ``config.max_forcing_items``
    state-forcing items; the hand-built network patches as many prompts as it tests."""
    probed = probe_mixture(mixture, config.probe_tasks)
    centroid_prompts = section_prompts(preset, probed, CENTROID_STREAM, config.centroid_prompts)
    patched_prompts = section_prompts(preset, probed, PATCHING_STREAM, config.patching_prompts)
    return {
        "state_forcing": state_forcing(model, probed, centroid_prompts, patched_prompts, config.state_threshold,
                                       config.seed, config.batch_size, device, config.max_forcing_items),
        "history": history_patching(model, probed, patched_prompts, config.hand_built_counts[1], config.max_distance,
                                    config.seed, config.batch_size, device),
    }


def offset_summary_section(model: RoFormer, tokens: torch.Tensor, prompt_format: hmm.PromptFormat,
                           config: AnalysisConfig, device: torch.device) -> dict:
    """:func:`roformer_offset_summary` of ``model`` over non-delimiter queries with
    :func:`summary_max_offset` earlier positions, as lists."""
    max_offset = summary_max_offset(prompt_format)
    queries = ~prompt_format.is_delimiter & (torch.arange(prompt_format.length) >= max_offset)
    summary = roformer_offset_summary(model, tokens, queries, max_offset, device, config.batch_size, "offset summary")
    return {"offsets": [-offset for offset in range(max_offset + 1)], "queries_per_prompt": int(queries.sum()),
            "segment_length": prompt_format.demo_length + 1,
            **{kind: values.tolist() for kind, values in summary.items()}}


class Analysis(NamedTuple):
    """What :func:`analyze` returns: the report and what its attention figures show."""

    report: dict
    """The sections of ``analysis.json``: ``probe_positions_per_prompt``, ``sizes`` (the probe
    tasks and the probe and shuffle prompts drawn), ``hand_built``, and those of
    ``config.sections`` (``shuffle``, ``probes``, ``offsets``, ``patching``), with ``claims`` when
    both ``shuffle`` and ``probes`` ran."""
    example: torch.Tensor
    """``(N,)``: the held-out prompt of the attention figures."""
    trained_patterns: torch.Tensor
    """``(L, H, N, N)``: the trained RoFormer's attention weights on ``example``."""
    hand_built_composed: dict[str, torch.Tensor]
    """``{history.r: C_r (N, N)}``: its composed history attention on ``example``."""


def probe_mixture(mixture: hmm.Mixture, probe_tasks: int) -> hmm.Mixture:
    """The mixture the probe prompts come from: its first ``probe_tasks`` tasks with their
    weights renormalised (the task ids stay those of ``mixture``), or all of it for 0."""
    if not probe_tasks:
        return mixture
    if probe_tasks > mixture.num_tasks:
        raise ValueError(f"probe_tasks: {probe_tasks}; expected at most the mixture's {mixture.num_tasks} tasks (or 0)")
    weights = mixture.weights[:probe_tasks]
    return hmm.Mixture(mixture.hmm[:probe_tasks], weights / weights.sum())


def section_prompts(preset: ExperimentPreset, source: hmm.Mixture, stream: int, count: int) -> hmm.Prompts:
    """``count`` prompts of ``preset``'s format from ``source``, seeded by
    ``stream_seed(preset.data_seed, stream, 0)`` (each prompt set its own stream)."""
    return hmm.sample_prompts(source, count, preset.prompt_format, seed=stream_seed(preset.data_seed, stream, 0))


def analyze(model: RoFormer, preset: ExperimentPreset, config: AnalysisConfig, device: torch.device,
            mixture: hmm.Mixture | None = None) -> Analysis:
    """The sections ``config.sections`` of the report for ``model`` (trained on ``preset``'s
    mixture and prompt format), its random-init twin (``config.seed``) and the hand-built network,
    and the attention of the trained and the hand-built network on one held-out prompt.
    ``mixture``: the preset's mixture if the caller has built it already (default: build it)."""
    prompt_format = preset.prompt_format
    mixture = mixture if mixture is not None else preset.build_mixture()
    probed = probe_mixture(mixture, config.probe_tasks)
    train_prompts = section_prompts(preset, probed, PROBE_TRAIN_STREAM, config.probe_train_prompts)
    test_prompts = section_prompts(preset, probed, PROBE_TEST_STREAM, config.probe_test_prompts)
    shuffle_tokens = section_prompts(preset, mixture, SHUFFLE_STREAM, config.shuffle_prompts).tokens
    networks = {"trained": model, "random-init": random_init_like(model, config.seed).to(device)}
    hand_train, hand_test = config.hand_built_counts
    example = test_prompts.tokens[0]
    example_trace = hand_built_trace(example, mixture.num_tokens, config.max_distance)
    report = {
        "probe_positions_per_prompt": int(probe_positions(prompt_format, config.max_distance).sum()),
        "sizes": {"probe_tasks": probed.num_tasks, "probe_train_prompts": len(train_prompts.tokens),
                  "probe_test_prompts": len(test_prompts.tokens), "shuffle_prompts": len(shuffle_tokens)},
        "hand_built": {"history_length": config.max_distance + 1, "gd_steps": HAND_BUILT_STEPS,
                       "probe_train_prompts": hand_train, "probe_test_prompts": hand_test,
                       "shuffle_prompts": hand_test, "patched_prompts": hand_test},
    }
    if "shuffle" in config.sections:
        report["shuffle"] = shuffle_report(networks, shuffle_tokens[:hand_test], shuffle_tokens, prompt_format,
                                           mixture.num_tokens, config, device)
    if "probes" in config.sections:
        report["probes"] = probe_report(networks, train_prompts, test_prompts, probed, config, device)
    if "offsets" in config.sections:
        report["offsets"] = offset_report(networks, test_prompts.tokens, example_trace, prompt_format, config, device)
    if "patching" in config.sections:
        report["patching"] = patching_report(model, preset, mixture, config, device)
    if "probes" in config.sections:
        report["claims"] = claims_summary(report, model.config.num_layers, config.max_distance)
    return Analysis(report, example, roformer_patterns(model, example[None], device)[0],
                    hand_built_composed_history(example_trace))
