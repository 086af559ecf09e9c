"""Causal evidence by activation patching, measured against exact HMM counterfactuals
(``docs/analysis.md``, section "Patching"). Probes say what can be decoded; a patch says what the
network uses, and because the prompts come from known HMMs, the right answer to every patch is
known exactly.

Conventions (:mod:`hmm`): ``T[s, s'] = P(s_{t+1} = s' | s_t = s)``, ``O[s, o] = P(o_t = o | s_t = s)``;
segments of a prompt are independent runs of its task's HMM. A network's next-token distribution
``q`` at a position is its softmax over the p HMM tokens (the delimiter logit dropped:
:func:`empirical.yardsticks.evaluate.hmm_token_probs`, as in every evaluation). ``KL(p || q) = sum_o p_o log(p_o / q_o)``.

**State forcing** (RoFormer). At test position t of a prompt of task k the filtered posterior is
``b_t = P(s_t | o_1..o_t, task k)`` (the test sequence only: it is an independent run). Position t
*is in state s* when ``max b_t >= threshold`` at s (:func:`confident_states`). For layer l, the
centroid ``c_l(k, s)`` is the mean residual ``blocks.{l}.hook_resid_post`` over the test positions
of the centroid prompts of task k that are in state s (kept if at least
:data:`MIN_CENTROID_POSITIONS`). A forcing item is a test position of another prompt of task k in
state ``s0``, a target state ``s != s0`` and a wrong state ``s' not in {s0, s}`` drawn uniformly among
the kept centroids. Replacing the residual at (l, t) by ``c_l(k, s)`` should move the next-token
distribution to the exact counterfactual::

    P(o_{t+1} | s_t = s, task k) = sum_{s'} T_k[s, s'] O_k[s', .] = (T_k O_k)[s]

Reported: ``KL((T_k O_k)[s] || q)`` unpatched ("before"), after the patch, and after each control
patch: the wrong-state centroid ``c_l(k, s')``; the task's mean activation (all its test positions);
a random vector of the norm of ``c_l(k, s)``; the centroid of s after the states of the task's
centroid positions are shuffled. Also ``KL((T_k O_k)[s0] || q)`` unpatched: how close the network
comes to the counterfactual of the state the position is really in (a floor for the patch).

**History patching** (both networks). At the last position q of a prompt, the token r steps back,
``o_{q-r}`` (r = 1..R, inside the test sequence), is replaced by ``o'`` drawn from its own exact
predictive ``P(o_{q-r} | o_<q-r, task k)`` with its current value excluded (:func:`history_corruptions`),
so the modified prompt stays one the task can emit. The exact change is
``D = P(o_{q+1} | modified, task k) - P(o_{q+1} | prompt, task k)`` (:func:`hmm.next_token_probs`
on the test sequence). A network's change ``d = q_patched - q_clean`` after patching the stream of
position q after layer l with the stream of the *modified* prompt's run at (l, q) is scored by
the recovered fraction (:func:`recovered_fraction`)::

    f(l, r) = sum_i <d_i, D_i> / sum_i ||D_i||^2       (1 = the exact change, 0 = none)

the least-squares slope of the network's change on the exact one, over prompts i. The same
slope against the network's own response (the change when the last layer's stream is swapped,
which is the whole run on the modified prompt) says where that response sits, whether or not it
is right. For the hand-built network (``construction``) the same column swap is done after each
of its layers, and the slot patch writes ``e(o')`` into slot ``history.r`` of the last column
after the last history layer: its read-out is ``W_T x_test``, linear in the features, so its
prediction must become exactly ``W_T x'_test`` (the features of the modified prompt;
:func:`construction.reference.prediction` of the modified prompt) up to the construction-error
bound of the prompt. Its slot patch is scored against the exact change ``D`` and against the change
of the predictor the network approximates, ``P_L`` of the prompt's task with L = R + 1
(``slot_patch_vs_memory``): the hand-built read-out fits ``P_L`` from the demonstrations, so the
exact change is out of its reach where the HMM's memory is longer than L.

Intervals: percentile bootstrap over prompts (:mod:`empirical.analysis.probes`), of means (KL, and
paired differences control - patched) and of ratios of sums (KL ratio, recovered fractions).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from tqdm import tqdm

import construction
import hmm
from empirical.analysis.networks import HAND_BUILT_STEPS, hand_built_network, roformer_layer_name, roformer_streams
from empirical.analysis.probes import bootstrap_interval, bootstrap_ratio_interval
from empirical.yardsticks.evaluate import hmm_token_probs
from empirical.training.model import ResidualPatch, RoFormer
from hmm.memory import memory_predictor

MIN_CENTROID_POSITIONS = 5
"""Least number of centroid positions in a state for its centroid to be used."""
CENTROID = "state centroid"
CONTROLS = ("wrong-state centroid", "mean activation", "random, same norm", "shuffled-label centroid")
"""The four control patches of state forcing (module docstring)."""
FRACTION_TO_USE = 0.5
"""Decision threshold of ``docs/analysis.md``: a patch must remove at least this fraction of the
KL (state forcing) or carry at least this fraction of the exact change (history patching)."""


def check_threshold(threshold: float) -> None:
    """``ValueError`` unless ``0.5 < threshold <= 1`` (then at most one state reaches it)."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.5 < threshold <= 1:
        raise ValueError(f"state_threshold: {threshold!r}; expected a number in (0.5, 1] (then at most one state "
                         f"reaches it)")


def check_prompt_position(position: int, prompt_format: hmm.PromptFormat) -> None:
    """``ValueError`` unless ``position`` is a token (not a delimiter) position of the format."""
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < prompt_format.length:
        raise ValueError(f"position: {position!r}; expected an integer in 0..{prompt_format.length - 1} "
                         f"(a position of the {prompt_format.length}-token prompts)")
    if bool(prompt_format.is_delimiter[position]):
        raise ValueError(f"position: {position} is a delimiter of the prompt format {prompt_format}; expected "
                         f"a token position (a delimiter is fixed by the format, patching it is meaningless)")


def kl_divergence(target: torch.Tensor, model: torch.Tensor) -> torch.Tensor:
    """``sum_o p_o log(p_o / q_o)`` over the last axis, with ``0 log 0 = 0``."""
    target, model = target.double(), model.double()
    terms = torch.where(target > 0, target * (target.log() - model.log()), torch.zeros_like(target))
    return terms.sum(-1)


@torch.no_grad()
def patched_next_token(model: RoFormer, tokens: torch.Tensor, prompt_format: hmm.PromptFormat, position: int,
                       num_tokens: int, batch_size: int, device: torch.device, layer: int | None = None,
                       vectors: torch.Tensor | None = None) -> torch.Tensor:
    """``(B, p)`` float64 (CPU): the next-token distribution at ``position`` of the prompts
    ``tokens (B, N)``, after replacing ``blocks.{layer}.hook_resid_post`` at ``position`` by
    ``vectors (B, W)`` (unpatched when ``layer`` is None). The model is causal, so the prompts are
    cut after ``position``."""
    check_prompt_position(position, prompt_format)
    model.eval()
    prefix = tokens[:, : position + 1]
    rows = []
    for start in range(0, len(prefix), batch_size):
        chunk = prefix[start : start + batch_size].to(device)
        patches = () if layer is None else (ResidualPatch(layer, position, vectors[start : start + batch_size]),)
        rows.append(hmm_token_probs(model(chunk, patches)[:, position], num_tokens).cpu())
    return torch.cat(rows)


def confident_states(prompts: hmm.Prompts, mixture: hmm.Mixture, threshold: float) -> torch.Tensor:
    """``(B, test_length)`` int64: at each test position the state s with
    ``P(s_t = s | o_1..o_t, task) >= threshold`` (test sequence only), else -1."""
    check_threshold(threshold)
    test = prompts.tokens[:, prompts.format.test_positions]
    beliefs = hmm.filter_beliefs(mixture.hmm[prompts.task_ids], test).filtered
    best, state = beliefs.max(-1)
    return torch.where(best >= threshold, state, -1)


def counterfactual_next_token(mixture: hmm.Mixture, tasks: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """``(n, p)`` float64: ``P(o_{t+1} | s_t = states[i], task tasks[i]) = (T O)[s]`` of that task."""
    rows = mixture.hmm.transition[tasks, states]  # (n, S): P(s_{t+1} | s_t = s)
    return torch.einsum("ns,nsp->np", rows, mixture.hmm.emission[tasks]).double()


class Centroids(NamedTuple):
    """Per-layer statistics of the residuals at labelled positions."""

    state_mean: torch.Tensor
    """``(K, S, W)`` float64: mean residual of the positions of task k in state s (0 where none)."""
    count: torch.Tensor
    """``(K, S)`` int64: number of those positions."""
    task_mean: torch.Tensor
    """``(K, W)`` float64: mean residual of all positions of task k."""


def state_cells(tasks: torch.Tensor, states: torch.Tensor, num_states: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The labelled positions (``states >= 0``, bool ``(n,)``) and their cells ``task S + state``."""
    labelled = states >= 0
    return labelled, tasks[labelled] * num_states + states[labelled]


def state_counts(tasks: torch.Tensor, states: torch.Tensor, num_tasks: int, num_states: int) -> torch.Tensor:
    """``(K, S)`` int64: the number of positions labelled with each (task, state)."""
    _, cell = state_cells(tasks, states, num_states)
    return torch.bincount(cell, minlength=num_tasks * num_states).view(num_tasks, num_states)


def centroids(streams: torch.Tensor, tasks: torch.Tensor, states: torch.Tensor, num_tasks: int,
              num_states: int) -> Centroids:
    """:class:`Centroids` of ``streams (n, W)`` with labels ``tasks (n,)`` and ``states (n,)``
    (``-1`` = no confident state: counted in the task mean only)."""
    width = streams.shape[1]
    streams = streams.double()
    labelled, cell = state_cells(tasks, states, num_states)
    sums = torch.zeros(num_tasks * num_states, width, dtype=torch.float64).index_add_(0, cell, streams[labelled])
    count = state_counts(tasks, states, num_tasks, num_states)
    state_mean = sums.view(num_tasks, num_states, width) / count.clamp_min(1)[..., None]
    task_sums = torch.zeros(num_tasks, width, dtype=torch.float64).index_add_(0, tasks, streams)
    task_count = torch.bincount(tasks, minlength=num_tasks).clamp_min(1)
    return Centroids(state_mean, count, task_sums / task_count[:, None])


def shuffle_states_within_tasks(tasks: torch.Tensor, states: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``states`` with the labels of the labelled positions (``>= 0``) of each task permuted
    uniformly among those positions (so each state keeps its count)."""
    shuffled = states.clone()
    for task in torch.unique(tasks):
        where = torch.nonzero((tasks == task) & (states >= 0)).squeeze(1)
        shuffled[where] = states[where[torch.randperm(len(where), generator=generator)]]
    return shuffled


class ForcingItems(NamedTuple):
    """Test positions to force, one row each."""

    prompt: torch.Tensor
    """``(n,)`` index of the prompt."""
    position: torch.Tensor
    """``(n,)`` prompt position t (a test position)."""
    task: torch.Tensor
    own_state: torch.Tensor
    """``s0``, the state the position is in."""
    target_state: torch.Tensor
    """``s``, the state forced."""
    wrong_state: torch.Tensor
    """``s'``, the state of the wrong-state control."""


def forcing_items(states: torch.Tensor, task_ids: torch.Tensor, test_positions: torch.Tensor, usable: torch.Tensor,
                  generator: torch.Generator) -> tuple[ForcingItems, int]:
    """Every confident test position (``states (B, test_length) >= 0``) whose task has two usable
    centroids besides its own state (``usable (K, S)`` bool), with ``s`` and then ``s'`` drawn
    uniformly from them; also the number of confident positions skipped for want of them."""
    rows, skipped = [], 0
    for prompt, index in torch.nonzero(states >= 0).tolist():
        task, own = int(task_ids[prompt]), int(states[prompt, index])
        candidates = [s for s in torch.nonzero(usable[task]).squeeze(1).tolist() if s != own]
        if len(candidates) < 2:
            skipped += 1
            continue
        target = candidates.pop(int(torch.randint(len(candidates), (1,), generator=generator)))
        wrong = candidates[int(torch.randint(len(candidates), (1,), generator=generator))]
        rows.append((prompt, int(test_positions[index]), task, own, target, wrong))
    columns = torch.tensor(rows, dtype=torch.long).view(-1, 6).T
    return ForcingItems(*columns), skipped


def capped_items(items: ForcingItems, max_items: int | None, generator: torch.Generator) -> ForcingItems:
    """``items`` when there are at most ``max_items`` of them (or ``max_items`` is None), else
    ``max_items`` of them drawn uniformly without replacement, kept in their order (prompt, then
    position). Only a cap that cuts draws from ``generator``: below it every later draw, and so
    every result, is that of an uncapped run. ``ValueError`` unless ``max_items`` is None or an
    integer >= 1."""
    if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1):
        raise ValueError(f"max_items: {max_items!r}; expected an integer >= 1, or None for no cap")
    if max_items is None or len(items.prompt) <= max_items:
        return items
    kept = torch.randperm(len(items.prompt), generator=generator)[:max_items].sort().values
    return ForcingItems(*(column[kept] for column in items))


def items_by_test_position(items: ForcingItems, test_positions: torch.Tensor) -> torch.Tensor:
    """``(test_length,)`` int64: the number of items at each test position (the prompts forced
    there, each patched once per layer and condition)."""
    return (items.position[:, None] == test_positions[None]).sum(0)


def forcing_vectors(real: Centroids, shuffled: Centroids, items: ForcingItems,
                    generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``{condition: (n, W)}``: the vector each patch writes, for the centroid and the four
    :data:`CONTROLS` (module docstring)."""
    target = real.state_mean[items.task, items.target_state]
    direction = torch.randn(target.shape, generator=generator, dtype=torch.float64)
    return {
        CENTROID: target,
        CONTROLS[0]: real.state_mean[items.task, items.wrong_state],
        CONTROLS[1]: real.task_mean[items.task],
        CONTROLS[2]: direction * (target.norm(dim=1) / direction.norm(dim=1))[:, None],
        CONTROLS[3]: shuffled.state_mean[items.task, items.target_state],
    }


def forced_kl(model: RoFormer, tokens: torch.Tensor, prompt_format: hmm.PromptFormat, items: ForcingItems,
              counterfactual: torch.Tensor, vectors: dict[int, dict[str, torch.Tensor]], num_tokens: int,
              batch_size: int, device: torch.device) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The unpatched next-token distribution of every item ``(n, p)``, and ``KL(counterfactual || q)``
    after each patch of ``vectors = {layer: {condition: (n, W)}}``, ``(n,)`` under ``"layer l|condition"``."""
    n = len(items.prompt)
    unpatched = torch.empty(n, num_tokens, dtype=torch.float64)
    kl = {f"{roformer_layer_name(layer)}|{condition}": torch.empty(n, dtype=torch.float64)
          for layer, by_condition in vectors.items() for condition in by_condition}
    for position in tqdm(torch.unique(items.position).tolist(), desc="state forcing", unit="position", leave=False):
        rows = torch.nonzero(items.position == position).squeeze(1)
        prompts = tokens[items.prompt[rows]]
        unpatched[rows] = patched_next_token(model, prompts, prompt_format, position, num_tokens, batch_size, device)
        for layer, by_condition in vectors.items():
            for condition, vector in by_condition.items():
                patched = patched_next_token(model, prompts, prompt_format, position, num_tokens, batch_size, device,
                                             layer, vector[rows])
                kl[f"{roformer_layer_name(layer)}|{condition}"][rows] = kl_divergence(counterfactual[rows], patched)
    return unpatched, kl


def interval(values: torch.Tensor, groups: torch.Tensor) -> dict[str, float]:
    """Mean of ``values`` and its prompt-level bootstrap interval."""
    low, high = bootstrap_interval(values, groups)
    return {"mean": float(values.mean()), "ci_low": low, "ci_high": high}


def summarise_forcing(before: torch.Tensor, kl: dict[str, torch.Tensor], floor: torch.Tensor, groups: torch.Tensor,
                      num_layers: int) -> dict:
    """KL unpatched (``before``) and at the own state (``floor``) with intervals, and per layer:
    mean KL of the centroid patch and of each control (intervals), the paired differences
    control - centroid, the ratio ``sum KL_patched / sum KL_before`` (interval) and the verdict of
    the decision rule (``docs/analysis.md``): every difference's interval above 0 and the ratio's
    upper end at most ``1 - FRACTION_TO_USE``."""
    by_layer = {}
    for layer in range(num_layers):
        name = roformer_layer_name(layer)
        patched = kl[f"{name}|{CENTROID}"]
        controls = {control: kl[f"{name}|{control}"] for control in CONTROLS}
        low, high = bootstrap_ratio_interval(patched, before, groups)
        differences = {control: interval(values - patched, groups) for control, values in controls.items()}
        ratio = {"ratio": float(patched.sum() / before.sum()), "ci_low": low, "ci_high": high}
        by_layer[name] = {
            "kl": {CENTROID: interval(patched, groups), **{c: interval(v, groups) for c, v in controls.items()}},
            "control_minus_patched": differences,
            "patched_over_before": ratio,
            "uses_state": all(d["ci_low"] > 0 for d in differences.values()) and high <= 1 - FRACTION_TO_USE,
        }
    return {"before": interval(before, groups), "own_state_floor": interval(floor, groups), "by_layer": by_layer}


def state_forcing(model: RoFormer, mixture: hmm.Mixture, centroid_prompts: hmm.Prompts, patched_prompts: hmm.Prompts,
                  threshold: float, seed: int, batch_size: int, device: torch.device,
                  max_items: int | None = None) -> dict:
    """The state-forcing section (module docstring): centroids from ``centroid_prompts``, forcing
    items from ``patched_prompts`` -- at most ``max_items`` of them (:func:`capped_items`; None: all),
    each costing ``1 + 5 L`` passes of its prompt cut after its position -- KL before and after
    every patch, summarised per layer. Recorded: the cap (``max_items``), the items found
    (``items_found``) and those run (``items``).

    The items depend on the HMMs only (labels, centroid counts), so they are found before any
    forward pass. Where there is none -- no patched test position has a confident state and two
    other usable centroids, as at the paper's 128 states, whose filtered posteriors stay diffuse --
    the section records the counts and ``not_run`` (why), without ``before``, ``own_state_floor``
    and ``by_layer``, and the network is not run."""
    prompt_format = centroid_prompts.format
    test_positions = torch.nonzero(prompt_format.test_positions).squeeze(1)
    generator = torch.Generator().manual_seed(seed)
    labels = confident_states(centroid_prompts, mixture, threshold).reshape(-1)
    tasks = centroid_prompts.task_ids.repeat_interleave(len(test_positions))
    shuffled_labels = shuffle_states_within_tasks(tasks, labels, generator)
    K, S = mixture.num_tasks, mixture.hmm.num_states
    counts = state_counts(tasks, labels, K, S)
    patched_states = confident_states(patched_prompts, mixture, threshold)
    found, skipped = forcing_items(patched_states, patched_prompts.task_ids, test_positions,
                                   counts >= MIN_CENTROID_POSITIONS, generator)
    items = capped_items(found, max_items, generator)
    section = {
        "threshold": threshold,
        "centroid_prompts": len(centroid_prompts.tokens),
        "patched_prompts": len(patched_prompts.tokens),
        "confident_centroid_positions": int((labels >= 0).sum()),
        "confident_patched_positions": int((patched_states >= 0).sum()),
        "centroid_counts": counts.tolist(),
        "max_items": max_items,
        "items_found": len(found.prompt),
        "items": len(items.prompt),
        "items_by_test_position": items_by_test_position(items, test_positions).tolist(),
        "prompts_with_items": len(torch.unique(items.prompt)),
        "skipped_positions": skipped,
    }
    if len(items.prompt) == 0:
        return {**section, "not_run": (
            f"no test position of the {len(patched_prompts.tokens)} patched prompts has a state posterior >= "
            f"{threshold} and two other states with at least {MIN_CENTROID_POSITIONS} such centroid positions "
            f"({section['confident_centroid_positions']} of {len(labels)} centroid test positions have a state "
            f"posterior >= {threshold})")}
    streams = roformer_streams(model, centroid_prompts.tokens, prompt_format.test_positions, device, batch_size,
                               "centroid streams")
    layers = range(model.config.num_layers)
    real = {layer: centroids(streams[roformer_layer_name(layer)], tasks, labels, K, S) for layer in layers}
    shuffled = {layer: centroids(streams[roformer_layer_name(layer)], tasks, shuffled_labels, K, S) for layer in layers}
    vectors = {layer: forcing_vectors(real[layer], shuffled[layer], items, generator) for layer in layers}
    counterfactual = counterfactual_next_token(mixture, items.task, items.target_state)
    unpatched, kl = forced_kl(model, patched_prompts.tokens, prompt_format, items, counterfactual, vectors,
                              mixture.num_tokens, batch_size, device)
    before = kl_divergence(counterfactual, unpatched)
    floor = kl_divergence(counterfactual_next_token(mixture, items.task, items.own_state), unpatched)
    return {**section, **summarise_forcing(before, kl, floor, items.prompt, model.config.num_layers)}


def history_corruptions(prompts: hmm.Prompts, mixture: hmm.Mixture, max_distance: int,
                        generator: torch.Generator) -> torch.Tensor:
    """``(B, R)`` int64, ``R = max_distance``: for each prompt and r, the token ``o'`` that replaces
    ``o_{q-r}`` (q = the last position), drawn from ``P(o_{q-r} = . | o_<q-r, task)`` of the test
    sequence with the current token's probability set to 0 and the rest renormalised."""
    test = prompts.tokens[:, prompts.format.test_positions]
    predictive = hmm.next_token_probs(mixture.hmm[prompts.task_ids], test)  # row i: P(o_{i+1} | o_<=i)
    length = test.shape[1]
    columns = []
    for r in range(1, max_distance + 1):
        index = length - 1 - r
        weights = predictive[:, index - 1].clone()
        weights.scatter_(1, test[:, index, None], 0.0)
        columns.append(torch.multinomial(weights, 1, generator=generator).squeeze(1))
    return torch.stack(columns, dim=1)


def corrupted_tokens(tokens: torch.Tensor, r: int, replacement: torch.Tensor) -> torch.Tensor:
    """``tokens (B, N)`` with the token r steps before the last position set to ``replacement (B,)``."""
    changed = tokens.clone()
    changed[:, -1 - r] = replacement
    return changed


def exact_history_changes(prompts: hmm.Prompts, mixture: hmm.Mixture, replacements: torch.Tensor,
                          history_length: int | None = None) -> torch.Tensor:
    """``(R, B, p)`` float64: ``D = P(o_{q+1} | modified) - P(o_{q+1} | prompt)`` for each r,
    given the prompt's task, from the test sequence (module docstring); with ``history_length``
    L, the same change of ``P_L`` (:func:`hmm.memory.memory_predictor`, stationary prior), the
    predictor the hand-built network approximates."""
    test_positions = prompts.format.test_positions
    model = mixture.hmm[prompts.task_ids]

    def predictive(tokens: torch.Tensor) -> torch.Tensor:
        test = tokens[:, test_positions]
        probabilities = (hmm.next_token_probs(model, test) if history_length is None
                         else memory_predictor(model, test, history_length))
        return probabilities[:, -1]

    clean = predictive(prompts.tokens)
    changes = [predictive(corrupted_tokens(prompts.tokens, r, replacements[:, r - 1])) - clean
               for r in range(1, replacements.shape[1] + 1)]
    return torch.stack(changes).double()


@torch.no_grad()
def trained_history_changes(model: RoFormer, prompts: hmm.Prompts, replacements: torch.Tensor, num_tokens: int,
                            batch_size: int, device: torch.device) -> torch.Tensor:
    """``(R, L, B, p)`` float64: the RoFormer's change ``q_patched - q_clean`` at the last position
    q when its stream after block l at q is replaced by that of the run on the prompt modified at
    distance r (activation patching of the clean run from the corrupted one)."""
    model.eval()
    prompt_format, tokens = prompts.format, prompts.tokens
    last = prompt_format.length - 1
    clean = patched_next_token(model, tokens, prompt_format, last, num_tokens, batch_size, device)
    changes = []
    for r in tqdm(range(1, replacements.shape[1] + 1), desc="history patching trained", unit="distance", leave=False):
        modified = corrupted_tokens(tokens, r, replacements[:, r - 1])
        streams = torch.cat([
            torch.stack([cache[f"blocks.{layer}.hook_resid_post"][:, last]
                         for layer in range(model.config.num_layers)], dim=1).cpu()
            for cache in (model.run_with_cache(chunk.to(device))[1] for chunk in modified.split(batch_size))
        ])  # (B, L, W)
        changes.append(torch.stack([
            patched_next_token(model, tokens, prompt_format, last, num_tokens, batch_size, device, layer,
                               streams[:, layer]) - clean
            for layer in range(model.config.num_layers)
        ]))
    return torch.stack(changes)


def column_patch(after: str, column: int, values: torch.Tensor, rows: range | None = None) -> Callable:
    """A ``patch`` for :meth:`construction.Network.forward`: after layer ``after`` (or
    ``"embedding"``), set ``rows`` (all rows if None) of ``column`` to ``values``."""
    selected = slice(None) if rows is None else slice(rows.start, rows.stop)

    def patch(name: str, stream: torch.Tensor) -> torch.Tensor:
        if name != after:
            return stream
        patched = stream.clone()
        patched[selected, column] = values.to(stream.dtype)
        return patched

    return patch


class HandBuiltChanges(NamedTuple):
    """The hand-built network's history-patching results on one prompt, R = number of distances."""

    layers: tuple[str, ...]
    """``embedding`` and its layer names: where the column swap is done."""
    column_swap: torch.Tensor
    """``(R, layers, p)``: change of the prediction after swapping the last column after each layer."""
    slot: torch.Tensor
    """``(R, p)``: change after writing ``e(o')`` into ``history.r`` of the last column."""
    slot_error: torch.Tensor
    """``(R,)``: ``max |slot-patched prediction - W_T x'_test|``."""
    error_bound: float
    """The construction-error bound of the prompt (:meth:`construction.ConstructionSpec.error_bound`)."""


def hand_built_history_changes(tokens: torch.Tensor, replacements: torch.Tensor, num_tokens: int) -> HandBuiltChanges:
    """History patching of the hand-built network (``L = R + 1``, :data:`HAND_BUILT_STEPS` GD
    steps) built for the prompt ``tokens (N,)``, with ``replacements (R,)`` (module docstring).
    The same network serves the modified prompts: they differ only in the test sequence, which
    holds no regression sample, so the spec built for the prompt is theirs too."""
    distances = len(replacements)
    prompt = tokens.numpy()
    network = hand_built_network(tokens, num_tokens, distances)
    spec = network.spec
    clean = network.forward(prompt, record_attention=False)
    layers = (construction.Stage.EMBEDDING.value,) + clean.layer_names
    last_history = clean.layers_of(construction.Stage.HISTORY)[-1]
    column = len(prompt)  # the last column (column 0 is the embedding's leading delimiter)
    swaps, slots, errors = [], [], []
    for r in range(1, distances + 1):
        modified = corrupted_tokens(tokens[None], r, replacements[r - 1 : r])[0].numpy()
        corrupted = network.forward(modified, record_attention=False)
        swaps.append(torch.stack([
            network.forward(prompt, record_attention=False,
                            patch=column_patch(name, column, corrupted.residual(name)[:, column])).prediction
            for name in layers
        ]) - clean.prediction)
        one_hot = torch.nn.functional.one_hot(replacements[r - 1], num_tokens + 1)
        slot = network.forward(prompt, record_attention=False,
                               patch=column_patch(last_history, column, one_hot, clean.layout.rows(f"history.{r}")))
        formula = torch.as_tensor(construction.reference.prediction(modified, num_tokens, distances + 1, spec.eta,
                                                                    HAND_BUILT_STEPS))
        slots.append(slot.prediction - clean.prediction)
        errors.append((slot.prediction - formula).abs().max())
    return HandBuiltChanges(layers, torch.stack(swaps), torch.stack(slots), torch.stack(errors),
                            spec.error_bound(len(prompt) + 1))


def recovered_fraction(network_change: torch.Tensor, exact_change: torch.Tensor, groups: torch.Tensor) -> dict:
    """``f = sum_i <d_i, D_i> / sum_i ||D_i||^2`` over items i (rows of ``(n, p)`` changes) and its
    prompt-level bootstrap interval (module docstring)."""
    numerators = (network_change.double() * exact_change).sum(-1)
    denominators = exact_change.pow(2).sum(-1)
    low, high = bootstrap_ratio_interval(numerators, denominators, groups)
    return {"fraction": float(numerators.sum() / denominators.sum()), "ci_low": low, "ci_high": high}


def history_section(changes: torch.Tensor, exact: torch.Tensor, layer_names: list[str]) -> dict:
    """For ``changes (R, layers, B, p)`` (the last layer's swap is the whole run on the modified
    prompt) and ``exact (R, B, p)``, per distance r: the recovered fraction of each layer against
    the exact change (``exact``) and against the network's own change (``own``: where its response
    sits), and the layers that use the token r back by the rule of ``docs/analysis.md``: the
    interval of the fraction of the exact change has its lower end at least :data:`FRACTION_TO_USE`."""
    groups = torch.arange(exact.shape[1])
    section = {}
    for r in range(1, exact.shape[0] + 1):
        by_layer = changes[r - 1]
        against_exact = {name: recovered_fraction(by_layer[index], exact[r - 1], groups)
                         for index, name in enumerate(layer_names)}
        against_own = {name: recovered_fraction(by_layer[index], by_layer[-1], groups)
                       for index, name in enumerate(layer_names)}
        section[f"r={r}"] = {"exact": against_exact, "own": against_own,
                             "uses_history": [name for name, result in against_exact.items()
                                              if result["ci_low"] >= FRACTION_TO_USE]}
    return section


def history_patching(model: RoFormer, mixture: hmm.Mixture, prompts: hmm.Prompts, hand_built_prompts: int,
                     max_distance: int, seed: int, batch_size: int, device: torch.device) -> dict:
    """The history-patching section: both networks on the same corruptions, the hand-built one on
    the first ``hand_built_prompts`` prompts (module docstring)."""
    replacements = history_corruptions(prompts, mixture, max_distance, torch.Generator().manual_seed(seed))
    exact = exact_history_changes(prompts, mixture, replacements)
    trained = trained_history_changes(model, prompts, replacements, mixture.num_tokens, batch_size, device)
    hand = [hand_built_history_changes(tokens, row, mixture.num_tokens)
            for tokens, row in tqdm(list(zip(prompts.tokens[:hand_built_prompts], replacements)),
                                    desc="history patching hand-built", unit="prompt", leave=False)]
    hand_exact = exact[:, :hand_built_prompts]
    hand_prompts = hmm.Prompts(prompts.tokens[:hand_built_prompts], prompts.task_ids[:hand_built_prompts],
                               prompts.states[:hand_built_prompts], prompts.format)
    memory = exact_history_changes(hand_prompts, mixture, replacements[:hand_built_prompts], max_distance + 1)
    slot = torch.stack([result.slot for result in hand], dim=1)  # (R, B, p)
    groups = torch.arange(len(hand))
    return {
        "query_position": prompts.format.length - 1,
        "distances": list(range(1, max_distance + 1)),
        "exact_change_rms": exact.pow(2).sum(-1).mean(-1).sqrt().tolist(),
        "trained": {
            "prompts": len(prompts.tokens),
            "by_distance": history_section(trained, exact,
                                           [roformer_layer_name(layer) for layer in range(model.config.num_layers)]),
        },
        "hand-built": {
            "prompts": len(hand),
            "gd_steps": HAND_BUILT_STEPS,
            "by_distance": history_section(torch.stack([result.column_swap for result in hand], dim=2), hand_exact,
                                           list(hand[0].layers)),
            "slot_patch": {f"r={r}": recovered_fraction(slot[r - 1], hand_exact[r - 1], groups)
                           for r in range(1, max_distance + 1)},
            "memory_change_rms": memory.pow(2).sum(-1).mean(-1).sqrt().tolist(),
            "slot_patch_vs_memory": {f"r={r}": recovered_fraction(slot[r - 1], memory[r - 1], groups)
                                     for r in range(1, max_distance + 1)},
            "slot_patch_max_error": float(max(result.slot_error.max() for result in hand)),
            "max_error_bound": max(result.error_bound for result in hand),
        },
    }
