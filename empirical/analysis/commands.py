"""``hmmtf analyze [CHECKPOINT]``: look inside a trained RoFormer and beside it the hand-built
network -- the shuffle test (Figure 2), layer-wise probes (Figure 3a/3b) with a randomly
initialised network of the same shape as chance baseline, attention heat-maps (Figure 7) and
relative-offset attention profiles matched against the hand-built history layers. Writes
``analysis.json`` and the figures (``empirical.analysis.figures``) to ``--out``. Definitions are
in the docstrings of ``empirical.analysis.shuffle``, ``.probes`` and ``.offsets``,
and in ``docs/analysis.md``.

Prompts: every set comes from its own seed ``stream_seed(data_seed, stream, 0)`` with streams
:data:`PROBE_TRAIN_STREAM`, :data:`PROBE_TEST_STREAM`, :data:`SHUFFLE_STREAM`, none of which
training (stream 0) or ``hmmtf evaluate`` (1, 2) uses.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from tqdm import tqdm

import hmm
from empirical.analysis.figures import (
    plot_attention_comparison,
    plot_offset_profiles,
    plot_previous_token_probes,
    plot_shuffle,
    plot_task_state_probes,
    plot_trained_attention,
)
from empirical.analysis.networks import (
    HAND_BUILT_STEPS,
    hand_built_composed_history,
    hand_built_scores,
    hand_built_streams,
    hand_built_trace,
    hand_built_weights,
    roformer_offset_profiles,
    roformer_patterns,
    roformer_scores,
    roformer_streams,
)
from empirical.analysis.offsets import best_matching_heads, offset_profile
from empirical.analysis.probes import probe_accuracy, probe_positions, probe_targets
from empirical.analysis.shuffle import ScoresFunction, random_derangements, shuffle_change
from empirical.checkpoint import load_checkpoint
from empirical.commands import build_mixture
from empirical.data import stream_seed
from empirical.model import RoFormer
from empirical.presets import preset_from_task

PROBE_TRAIN_STREAM = 3
PROBE_TEST_STREAM = 4
SHUFFLE_STREAM = 5
DEFAULT_CHECKPOINT = "runs/cpu-small/checkpoint"
REPORT_FILE = "analysis.json"


def random_init_like(model: RoFormer, seed: int) -> RoFormer:
    """A RoFormer of the same config with fresh initial weights drawn after
    ``torch.manual_seed(seed)`` (the caller's random state is restored afterwards)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return RoFormer(model.config)


def summarise_shuffle(changes: dict[str, torch.Tensor]) -> dict[str, dict]:
    """Per layer: the head-averaged metric of each prompt summarised over prompts (mean, std,
    quartiles, number of prompts) and the per-head means over prompts."""
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


def hand_built_profiles(trace, query_positions: torch.Tensor, max_offset: int) -> dict[str, dict[str, torch.Tensor]]:
    """Offset profiles of the hand-built history and label layers: ``direct`` (each layer's own
    attention) and ``composed`` (history layers: :func:`hand_built_composed_history`)."""
    weights = hand_built_weights(trace)
    composed = hand_built_composed_history(trace)
    direct = {name: offset_profile(weights[name][:1], query_positions, max_offset)[0]
              for name in [*composed, "label"]}
    composed_profiles = {name: offset_profile(matrix[None], query_positions, max_offset)[0]
                         for name, matrix in composed.items()}
    return {"direct": direct, "composed": composed_profiles}


def claims_summary(report: dict, num_layers: int, max_distance: int) -> dict:
    """The numbers behind the three verdicts of ``docs/analysis.md``, from the trained network:
    shuffle metric of the lower and upper half of the layers; for task and state the best layer
    and the first layer reaching 95% of the best accuracy; for each distance k the layer of the
    peak accuracy, the peak and the last layer's accuracy (with intervals)."""
    layers = [f"layer {layer}" for layer in range(1, num_layers + 1)]
    half = num_layers // 2
    lower, upper = layers[:half], layers[half:]

    def accuracies(target: str) -> list[float]:
        return [report["probes"]["trained"][target][name]["accuracy"] for name in ["embedding"] + layers]

    def first_reaching(values: list[float], fraction: float) -> int:
        return next(index for index, value in enumerate(values) if value >= fraction * max(values))

    timing = {}
    for target in ("task", "state"):
        values = accuracies(target)
        timing[target] = {"accuracy_by_layer": values, "best_layer": values.index(max(values)),
                          "first_layer_at_95_percent_of_best": first_reaching(values, 0.95)}
    previous = {}
    for k in range(1, max_distance + 1):
        target = f"token {k} back"
        results = [report["probes"]["trained"][target][name] for name in ["embedding"] + layers]
        values = [result["accuracy"] for result in results]
        peak = values.index(max(values))
        previous[target] = {"accuracy_by_layer": values, "peak_layer": peak, "peak": results[peak],
                            "last_layer": results[-1]}
    return {
        "layer_index": "0 = embedding, l = residual stream after layer l",
        "shuffle": {variant: {"lower_layers": lower, "upper_layers": upper,
                              "lower_mean": sum(shuffle[name]["mean"] for name in lower) / len(lower),
                              "upper_mean": sum(shuffle[name]["mean"] for name in upper) / len(upper),
                              "by_layer": [shuffle[name]["mean"] for name in layers]}
                    for variant, shuffle in report["shuffle"]["trained"].items()},
        "task_vs_state": timing,
        "previous_tokens": previous,
    }


def shuffle_report(networks: dict[str, RoFormer], hand_built_tokens: torch.Tensor, tokens: torch.Tensor,
                   prompt_format: hmm.PromptFormat, num_tokens: int, args, device: torch.device) -> dict:
    """:func:`shuffle_section` of both RoFormers on ``tokens`` and of the hand-built network on
    ``hand_built_tokens``, for all pairs and for pairs with ``max_distance`` tokens of context."""
    min_contexts = (0, args.max_distance)
    report = {name: shuffle_section(roformer_scores(model, device), tokens, prompt_format, args.seed,
                                    args.batch_size, min_contexts, f"shuffle {name}")
              for name, model in networks.items()}
    report["hand-built"] = shuffle_section(hand_built_scores(num_tokens, args.max_distance), hand_built_tokens,
                                           prompt_format, args.seed, args.batch_size, min_contexts,
                                           "shuffle hand-built")
    return report


def probe_report(networks: dict[str, RoFormer], train_prompts: hmm.Prompts, test_prompts: hmm.Prompts,
                 hand_built_counts: tuple[int, int], num_tokens: int, args, device: torch.device) -> dict:
    """:func:`probe_section` of both RoFormers, and of the hand-built network on the first
    ``hand_built_counts = (train, test)`` prompts of each set."""
    positions = probe_positions(train_prompts.format, args.max_distance)
    per_prompt = int(positions.sum())
    train_targets = probe_targets(train_prompts, args.max_distance)
    test_targets = probe_targets(test_prompts, args.max_distance)
    groups = torch.arange(len(test_prompts.tokens)).repeat_interleave(per_prompt)
    report = {}
    for name, model in networks.items():
        report[name] = probe_section(
            roformer_streams(model, train_prompts.tokens, positions, device, args.batch_size, f"streams {name}"),
            roformer_streams(model, test_prompts.tokens, positions, device, args.batch_size, f"streams {name}"),
            train_targets, test_targets, groups, device, f"probes {name}")
    hand_train, hand_test = hand_built_counts
    report["hand-built"] = probe_section(
        hand_built_streams(train_prompts.tokens[:hand_train], positions, num_tokens, args.max_distance,
                           "streams hand-built"),
        hand_built_streams(test_prompts.tokens[:hand_test], positions, num_tokens, args.max_distance,
                           "streams hand-built"),
        {key: value[: hand_train * per_prompt] for key, value in train_targets.items()},
        {key: value[: hand_test * per_prompt] for key, value in test_targets.items()},
        groups[: hand_test * per_prompt], device, "probes hand-built")
    return report


def offset_report(networks: dict[str, RoFormer], tokens: torch.Tensor, hand_built_example, prompt_format: hmm.PromptFormat,
                  args, device: torch.device) -> dict:
    """Offset profiles of every RoFormer head over ``tokens`` (non-delimiter queries with
    ``max_offset`` earlier positions), of the hand-built layers on one prompt (they depend on
    positions only), and each hand-built history layer's best-matching trained head."""
    query_positions = ~prompt_format.is_delimiter & (torch.arange(prompt_format.length) >= args.max_offset)
    profiles = {name: roformer_offset_profiles(model, tokens, query_positions, args.max_offset, device,
                                               args.batch_size, f"offsets {name}")
                for name, model in networks.items()}
    hand_profiles = hand_built_profiles(hand_built_example, query_positions, args.max_offset)
    return {
        "offsets": [-offset for offset in range(args.max_offset + 1)] + ["other"],
        **{name: profile.tolist() for name, profile in profiles.items()},
        "hand-built": {kind: {name: profile.tolist() for name, profile in by_layer.items()}
                       for kind, by_layer in hand_profiles.items()},
        "best_match_composed": best_matching_heads(hand_profiles["composed"], profiles["trained"]),
        # The label layer attends ahead, which a causal head cannot: only history layers are matched.
        "best_match_direct": best_matching_heads(
            {name: profile for name, profile in hand_profiles["direct"].items() if name.startswith("history.")},
            profiles["trained"]),
    }


def write_figures(report: dict, model: RoFormer, example: torch.Tensor, example_trace,
                  prompt_format: hmm.PromptFormat, out: Path, device: torch.device) -> None:
    """The six figures of :mod:`empirical.analysis.figures` into ``out``."""
    trained_patterns = roformer_patterns(model, example[None], device)[0]
    plot_shuffle(report["shuffle"], out / "shuffle.png")
    plot_task_state_probes(report["probes"], out / "probes_task_state.png")
    plot_previous_token_probes(report["probes"], report["settings"]["max_distance"], out / "probes_previous_tokens.png")
    plot_trained_attention(trained_patterns, example, prompt_format, out / "attention_trained.png")
    plot_attention_comparison(hand_built_weights(example_trace), list(hand_built_composed_history(example_trace).values()),
                              trained_patterns, report["offsets"]["best_match_composed"],
                              out / "attention_hand_built_vs_trained.png")
    plot_offset_profiles(report["offsets"], out / "offset_profiles.png")


def run_analyze(args) -> int:
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    saved = load_checkpoint(Path(args.checkpoint), device)
    preset = preset_from_task(saved.config["task"])
    prompt_format = preset.prompt_format
    mixture = build_mixture(preset)

    def prompts(stream: int, count: int) -> hmm.Prompts:
        return hmm.sample_prompts(mixture, count, prompt_format, seed=stream_seed(preset.data_seed, stream, 0))

    train_prompts = prompts(PROBE_TRAIN_STREAM, args.probe_train_prompts)
    test_prompts = prompts(PROBE_TEST_STREAM, args.probe_test_prompts)
    shuffle_tokens = prompts(SHUFFLE_STREAM, args.shuffle_prompts).tokens
    networks = {"trained": saved.model, "random-init": random_init_like(saved.model, args.seed).to(device)}
    hand_built_counts = (args.hand_built_prompts, max(args.hand_built_prompts // 2, 1))
    example = test_prompts.tokens[0]
    example_trace = hand_built_trace(example, mixture.num_tokens, args.max_distance)

    report = {
        "command": args.command_line, "checkpoint": str(args.checkpoint), "step": saved.config["step"],
        "task": saved.config["task"], "model": saved.config["model"], "device": str(device),
        "settings": {key: value for key, value in vars(args).items() if key not in ("run", "command_line")},
        "probe_positions_per_prompt": int(probe_positions(prompt_format, args.max_distance).sum()),
        "hand_built": {"history_length": args.max_distance + 1, "gd_steps": HAND_BUILT_STEPS,
                       "probe_train_prompts": hand_built_counts[0], "probe_test_prompts": hand_built_counts[1],
                       "shuffle_prompts": hand_built_counts[1]},
        "shuffle": shuffle_report(networks, shuffle_tokens[: hand_built_counts[1]], shuffle_tokens, prompt_format,
                                  mixture.num_tokens, args, device),
        "probes": probe_report(networks, train_prompts, test_prompts, hand_built_counts, mixture.num_tokens, args,
                               device),
        "offsets": offset_report(networks, test_prompts.tokens, example_trace, prompt_format, args, device),
    }
    report["claims"] = claims_summary(report, saved.model.config.num_layers, args.max_distance)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_figures(report, saved.model, example, example_trace, prompt_format, out, device)
    report["runtime_s"] = time.perf_counter() - started
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"out": str(out), "runtime_s": round(report["runtime_s"], 1), "claims": report["claims"]}, indent=1))
    return 0


def register(subparsers) -> None:
    """Add ``analyze`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser("analyze", help="shuffle test, probes, attention maps, hand-built vs trained")
    parser.add_argument("checkpoint", nargs="?", default=DEFAULT_CHECKPOINT,
                        help=f"a checkpoint folder (default {DEFAULT_CHECKPOINT})")
    parser.add_argument("--out", default="figures/analysis", help="folder for analysis.json and the figures")
    parser.add_argument("--device", help="default: CUDA if available, else CPU")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per forward pass")
    parser.add_argument("--probe-train-prompts", type=int, default=512)
    parser.add_argument("--probe-test-prompts", type=int, default=256)
    parser.add_argument("--shuffle-prompts", type=int, default=256)
    parser.add_argument("--hand-built-prompts", type=int, default=48,
                        help="probe-training prompts of the hand-built network (half as many to test and shuffle)")
    parser.add_argument("--max-distance", type=int, default=5, help="largest k of the o_{t-k} probes")
    parser.add_argument("--max-offset", type=int, default=8, help="offsets 0..-max of the attention profiles")
    parser.add_argument("--seed", type=int, default=0, help="random-init network and shuffles")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.set_defaults(run=run_analyze)
