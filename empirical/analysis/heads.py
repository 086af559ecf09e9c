"""Which heads of a trained RoFormer are previous-token and induction heads, and what ablating them
does to its predictions (issue 35, item 3: the circuit the construction predicts).

The construction (arXiv 2506.01919) copies ``o_{t-1} ... o_{t-L+1}`` into every position with
history layers, previous-token heads at fixed offsets, then regresses in context on one-hot
histories, which for one-hot features is an in-context n-gram estimator. An n-gram estimator
that a network builds from attention needs heads that attend to the positions that followed
earlier occurrences of the current context: induction heads (Olsson et al. 2022; Akyurek et al.
2024, arXiv 2401.12973).

**Scores** of a head, from its attention ``A[b, i, j]`` (rows sum to 1, causal), averaged over
prompts b and the query positions i that the score is defined at:

* *previous-token score at offset d* (d = 1, 2): ``mean_{b, i >= d} A[b, i, i - d]``, the mean
  mass on the key d positions back (:func:`empirical.analysis.offsets.offset_sums`, entry d);
* *induction score of order n* (n = 1, 2)::

      M_n(i) = {j : n <= j <= i, o_{j-n..j-1} = o_{i-n+1..i}, none of them a delimiter, o_j not a delimiter}
      score  = mean over (b, i) with M_n(i) nonempty of  sum_{j in M_n(i)} A[b, i, j]

  the mass on the positions that followed an earlier occurrence of the n tokens ending at i: the
  events an in-context (n+1)-gram counts for row i (``ngram n+1`` of :mod:`empirical.yardsticks.ngram`, whose
  order counts the predicted token too). A delimiter in a context never matches: a query whose
  last n tokens hold a delimiter (or reach before the prompt's start) has no key, and a key whose
  preceding n tokens hold one, or which is itself a delimiter (not an HMM token, never counted as
  an event), is no key. So a context never crosses a segment boundary, as in :mod:`empirical.yardsticks.ngram`,
  except that the segment-start contexts padded with ``BOS`` there are not matched here.

Beside each score its *chance level*: attention spread uniformly over the causal keys,
``A[i, j] = 1 / (i + 1)``, puts ``|M(i)| / (i + 1)`` on the keys of a query (``1 / (i + 1)`` at
offset d), averaged over the same (b, i); a score is read against it. And the same scores of a
RoFormer of the same config freshly initialised with a fixed seed (the *random-init* control,
:func:`empirical.analysis.report.random_init_like`).

**Mean-ablation** of head h of block l: head h's output, columns ``h d_head .. (h+1) d_head - 1``
of the input of ``blocks[l].attn.out`` (the heads' outputs concatenated before the output
projection), is replaced at every position t by its mean at position t over reference prompts.
Implemented with forward pre-hooks on ``attn.out`` (:func:`mean_ablation`), so
:mod:`empirical.training.model` is unchanged; the means come from a recording pre-hook on the same module
(:func:`mean_head_outputs`) over the unablated model.

**Causal test** (:func:`ablation_effects`): per prompt b, the mean over its scored rows (the next
token an HMM token, :func:`empirical.yardsticks.ngram.scored_rows`, within a scope of
:func:`empirical.yardsticks.competence.scope_rows`) of ``KL(r || q) = sum_o r(o) log(r(o) / q(o))`` from a
reference predictor ``r`` (in-context n-grams, the prior-predictive ceiling, the unablated model)
to the model ``q`` (:func:`empirical.yardsticks.evaluate.model_predictor`: softmax over the HMM tokens),
before and after ablating a head set, and after ablating as many heads drawn at random from the
other heads; differences are paired over prompts (:func:`empirical.yardsticks.competence.paired`: mean,
standard error, 95% interval).

Heads are ``(layer, head)``, both 0-based, in the functions; the JSON names layers 1-based, as in
the figures of ``hmmtf analyze`` (``layer 1`` is block 0).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

import hmm
from empirical.analysis.networks import roformer_patterns
from empirical.analysis.offsets import offset_sums
from empirical.analysis.report import random_init_like
from empirical.yardsticks.competence import CEILING_SETTINGS, ceiling_estimates, fitted_ngrams, paired, scope_rows
from empirical.training.configs import check_integers, option
from empirical.yardsticks.curves import fresh_prompts
from empirical.training.data import stream_seed
from empirical.yardsticks.evaluate import model_predictor
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.yardsticks.ngram import scored_rows
from empirical.training.presets import ExperimentPreset
from empirical.yardsticks.regime import FRESH_PROMPT_STREAM
from hmm.model import check_tokens

PREVIOUS_TOKEN_OFFSETS = (1, 2)
"""Offsets d of the previous-token scores (the construction's first two history layers)."""
INDUCTION_ORDERS = (1, 2)
"""Orders n (context lengths) of the induction scores: what an in-context bigram and trigram need."""
REFERENCE_DRAW = 1
"""Draw index of the reference prompts whose mean head outputs replace an ablated head: draw 1 of
the fresh-HMM prompt stream (``stream_seed(data_seed, FRESH_PROMPT_STREAM, 1)``), whose draw 0
gives the evaluated prompts; same fresh HMMs, other prompts."""
UNABLATED = "unablated model"
"""Reference name of the model itself before ablation: ``KL(unablated || ablated)``, how far an
ablation moves the model at all."""
HEAD_GROUPS = ("previous-token", "induction")
"""The ablated head groups, each chosen by the scores whose names start with its name
(:func:`select_heads`)."""

Head = tuple[int, int]
"""``(layer, head)``, both 0-based."""


@dataclass(frozen=True)
class ScoreSums:
    """One score of every head summed over (prompt, query) pairs, so batches add up:
    ``mass (L, H)`` float64, the heads' attention on the scored keys; ``chance``, the uniform
    attention's mass on them; ``queries``, the number of pairs."""

    mass: torch.Tensor
    chance: float
    queries: int

    def __add__(self, other: ScoreSums) -> ScoreSums:
        return ScoreSums(self.mass + other.mass, self.chance + other.chance, self.queries + other.queries)

    @property
    def score(self) -> torch.Tensor:
        """``(L, H)``: the mean mass per pair (NaN without a pair)."""
        return self.mass / self.queries if self.queries else torch.full_like(self.mass, math.nan)

    @property
    def chance_level(self) -> float:
        """The mean chance mass per pair (NaN without a pair)."""
        return self.chance / self.queries if self.queries else math.nan

    def summary(self) -> dict:
        """JSON-ready: ``score[layer][head]`` (None without a pair), ``chance``, ``queries``."""
        if not self.queries:
            return {"score": None, "chance": None, "queries": 0}
        return {"score": self.score.tolist(), "chance": self.chance_level, "queries": self.queries}


def _check_patterns(patterns: torch.Tensor) -> None:
    if patterns.dim() != 5 or patterns.shape[-1] != patterns.shape[-2]:
        raise ValueError(f"patterns: shape {tuple(patterns.shape)}; expected (B, L, H, N, N) attention weights")


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: {value!r}; expected an integer >= 1")
    return value


def previous_token_sums(patterns: torch.Tensor, offset: int) -> ScoreSums:
    """The previous-token score at ``offset`` d (module docstring) of attention ``patterns
    (B, L, H, N, N)``: ``A[b, i, i - d]`` summed over prompts and queries ``i >= d``; chance
    ``1 / (i + 1)`` per pair."""
    _check_patterns(patterns)
    batch, layers, heads, length, _ = patterns.shape
    if isinstance(offset, bool) or not isinstance(offset, int) or not 1 <= offset < length:
        raise ValueError(f"offset: {offset!r}; expected an integer in 1..{length - 1} (prompts of {length} positions)")
    sums, counts = offset_sums(patterns.flatten(1, 2), torch.ones(length, dtype=torch.bool), offset)
    queries = torch.arange(offset, length, dtype=torch.float64)
    return ScoreSums(sums[:, offset].view(layers, heads), batch * float((1 / (queries + 1)).sum()), int(counts[offset]))


def induction_keys(tokens: torch.Tensor, num_tokens: int, order: int) -> torch.Tensor:
    """``(B, N, N)`` bool: entry ``[b, i, j]`` says j is in ``M_n(i)`` of prompt b (module
    docstring) for ``n = order``; the delimiter is token ``num_tokens``."""
    tokens = check_tokens(tokens, num_tokens, "tokens", allow_delimiter=True)
    if tokens.dim() != 2:
        raise ValueError(f"tokens: shape {tuple(tokens.shape)}; expected (B, N) prompts")
    order = _check_positive("order", order)
    length = tokens.shape[1]
    delimiter = num_tokens
    context = torch.zeros_like(tokens)
    clean = torch.ones_like(tokens, dtype=torch.bool)
    for back in range(order):  # the token `back` steps before i; the prompt's start counts as a delimiter
        earlier = torch.full_like(tokens, delimiter)
        earlier[:, back:] = tokens[:, :length - back]
        context = context * (num_tokens + 1) + earlier
        clean &= earlier != delimiter
    # Key j is preceded by the context that ends at j - 1, and is an HMM token.
    key_context = torch.cat([torch.full_like(context[:, :1], -1), context[:, :-1]], dim=1)
    key_clean = torch.cat([torch.zeros_like(clean[:, :1]), clean[:, :-1]], dim=1) & (tokens != delimiter)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return (clean[:, :, None] & key_clean[:, None, :] & (context[:, :, None] == key_context[:, None, :])
            & causal)


def induction_sums(patterns: torch.Tensor, keys: torch.Tensor) -> ScoreSums:
    """The induction score (module docstring) of attention ``patterns (B, L, H, N, N)`` for the
    keys ``keys (B, N, N)`` of :func:`induction_keys`: ``sum_{j in M(i)} A[b, i, j]`` summed over
    the (b, i) with a key; chance ``|M(i)| / (i + 1)`` per pair."""
    _check_patterns(patterns)
    if keys.shape != (patterns.shape[0], *patterns.shape[-2:]):
        raise ValueError(f"keys: shape {tuple(keys.shape)}; expected {(patterns.shape[0], *patterns.shape[-2:])} "
                         f"(prompts, queries, keys of the patterns)")
    keys = keys.to(patterns.device)
    has_key = keys.any(-1)
    mass = torch.einsum("blhqk,bqk->blhq", patterns.double(), keys.double())
    matches = keys.sum(-1).double()
    uniform = matches / torch.arange(1, keys.shape[-1] + 1, dtype=torch.float64, device=keys.device)
    return ScoreSums((mass * has_key[:, None, None]).sum((0, 3)).cpu(), float(uniform[has_key].sum()),
                     int(has_key.sum()))


@torch.no_grad()
def head_scores(model: RoFormer, tokens: torch.Tensor, num_tokens: int, device: torch.device | str,
                batch_size: int, offsets: Sequence[int] = PREVIOUS_TOKEN_OFFSETS,
                orders: Sequence[int] = INDUCTION_ORDERS) -> dict[str, ScoreSums]:
    """``{"previous-token d": ..., "induction n": ...}`` for the ``offsets`` and ``orders``: the
    scores of every head of ``model`` over the prompts ``tokens``, ``batch_size`` prompts per
    forward pass (:func:`empirical.analysis.networks.roformer_patterns`)."""
    batch_size = _check_positive("batch_size", batch_size)
    totals: dict[str, ScoreSums] = {}
    for batch in tokens.split(batch_size):
        patterns = roformer_patterns(model, batch, device)
        sums = {f"previous-token {d}": previous_token_sums(patterns, d) for d in offsets}
        sums.update({f"induction {n}": induction_sums(patterns, induction_keys(batch, num_tokens, n)) for n in orders})
        totals = {name: totals[name] + value if name in totals else value for name, value in sums.items()}
    return totals


def check_heads(heads: Sequence[Head], config: RoFormerConfig) -> list[Head]:
    """``heads`` as a sorted list of distinct ``(layer, head)``; ``ValueError`` naming the first
    that is not a pair of integers in ``0..num_layers-1`` and ``0..num_heads-1``."""
    for index, pair in enumerate(heads):
        if (not isinstance(pair, tuple) or len(pair) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in pair)
                or not (0 <= pair[0] < config.num_layers and 0 <= pair[1] < config.num_heads)):
            raise ValueError(f"heads[{index}]: {pair!r}; expected (layer, head) with layer in 0..{config.num_layers - 1} "
                             f"and head in 0..{config.num_heads - 1}")
    return sorted(set(heads))


@torch.no_grad()
def mean_head_outputs(model: RoFormer, tokens: torch.Tensor, device: torch.device | str,
                      batch_size: int) -> torch.Tensor:
    """``(L, N, W)`` float64 on ``device``: per block l and position t, the mean over the prompts
    ``tokens`` of the input of ``blocks[l].attn.out`` (head h in columns ``h d_head ..``),
    recorded by forward pre-hooks during unablated forward passes."""
    batch_size = _check_positive("batch_size", batch_size)
    config = model.config
    total = torch.zeros(config.num_layers, tokens.shape[1], config.width, dtype=torch.float64, device=device)

    def recorder(layer: int):
        def hook(module, inputs):
            total[layer] += inputs[0].double().sum(0)

        return hook

    handles = [block.attn.out.register_forward_pre_hook(recorder(layer)) for layer, block in enumerate(model.blocks)]
    try:
        model.eval()
        for batch in tokens.split(batch_size):
            model(batch.to(device))
    finally:
        for handle in handles:
            handle.remove()
    return total / len(tokens)


def _replace_heads(mean: torch.Tensor, columns: torch.Tensor):
    """A pre-hook of ``attn.out`` that sets ``columns`` of its input ``(B, N, W)`` to ``mean (N, W)``'s."""

    def hook(module, inputs):
        (mixed,) = inputs
        if mixed.shape[-2] != mean.shape[0]:
            raise ValueError(f"tokens: prompts of {mixed.shape[-2]} positions; expected {mean.shape[0]}, the length of "
                             f"the reference prompts the ablation means were taken on")
        mixed = mixed.clone()
        mixed[..., columns] = mean[:, columns].to(device=mixed.device, dtype=mixed.dtype)
        return (mixed,)

    return hook


@contextmanager
def mean_ablation(model: RoFormer, heads: Sequence[Head], means: torch.Tensor) -> Iterator[RoFormer]:
    """``model`` with the ``heads`` mean-ablated (module docstring) inside the ``with`` block:
    ``means (L, N, W)`` of :func:`mean_head_outputs`. The hooks are removed on leaving the block,
    also on an exception; an empty ``heads`` installs none."""
    config = model.config
    heads = check_heads(heads, config)
    if means.shape[0] != config.num_layers or means.dim() != 3 or means.shape[2] != config.width:
        raise ValueError(f"means: shape {tuple(means.shape)}; expected ({config.num_layers}, N, {config.width}) "
                         f"(mean_head_outputs of this model)")
    handles = []
    try:
        for layer in sorted({layer for layer, _ in heads}):
            columns = torch.cat([torch.arange(head * config.head_dim, (head + 1) * config.head_dim)
                                 for block, head in heads if block == layer]).to(means.device)
            handles.append(model.blocks[layer].attn.out.register_forward_pre_hook(_replace_heads(means[layer], columns)))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def ablated_probabilities(model: RoFormer, tokens: torch.Tensor, num_tokens: int, heads: Sequence[Head],
                          means: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(B, N, p)`` float64: :func:`empirical.yardsticks.evaluate.model_predictor` of ``model`` with ``heads``
    mean-ablated (:func:`mean_ablation`)."""
    with mean_ablation(model, heads, means):
        return model_predictor(model, num_tokens, device)(tokens)


def kl_per_prompt(reference: torch.Tensor, probabilities: torch.Tensor, tokens: torch.Tensor, num_tokens: int,
                  rows: torch.Tensor) -> torch.Tensor:
    """``(B,)``: each prompt's mean ``KL(r || q) = sum_o r log(r / q)`` (``0 log 0 = 0``) over its
    scored rows within ``rows (N,)``, from ``reference (B, N, p)`` to ``probabilities (B, N, p)``."""
    mask, _ = scored_rows(tokens, num_tokens)
    mask = mask & rows
    divergence = (torch.xlogy(reference, reference) - torch.xlogy(reference, probabilities)).sum(-1)
    return torch.where(mask, divergence, 0.0).sum(-1) / mask.sum(-1)


def random_head_sets(config: RoFormerConfig, size: int, draws: int, exclude: Sequence[Head],
                     seed: int) -> list[list[Head]]:
    """``draws`` sets of ``size`` distinct heads, each drawn uniformly from the heads not in
    ``exclude`` (``torch.Generator`` seeded with ``seed``)."""
    excluded = set(check_heads(exclude, config))
    pool = [(layer, head) for layer in range(config.num_layers) for head in range(config.num_heads)
            if (layer, head) not in excluded]
    if not 1 <= size <= len(pool):
        raise ValueError(f"size: {size!r}; expected an integer in 1..{len(pool)} (the heads outside the ablated "
                         f"group)")
    generator = torch.Generator().manual_seed(seed)
    return [sorted(pool[k] for k in torch.randperm(len(pool), generator=generator)[:size].tolist())
            for _ in range(_check_positive("draws", draws))]


def heads_json(heads: Sequence[Head]) -> list[dict]:
    """``[{"layer": l + 1, "head": h}]``: layers 1-based, as in the figures."""
    return [{"layer": layer + 1, "head": head} for layer, head in heads]


def ablation_effects(model: RoFormer, tokens: torch.Tensor, prompt_format: hmm.PromptFormat, num_tokens: int,
                     references: dict[str, torch.Tensor], groups: dict[str, Sequence[Head]], means: torch.Tensor,
                     draws: int, seed: int, device: torch.device | str = "cpu") -> dict:
    """The causal test (module docstring) as a JSON-ready dict. ``references``: ``{name: (B, N, p)}``
    next-token distributions on the prompts ``tokens`` (of ``prompt_format``), to which
    :data:`UNABLATED` is added. For every scope of :func:`empirical.yardsticks.competence.scope_rows` and
    reference: ``before`` (the unablated model's KL);
    per group, ``after`` and ``change = after - before``, the same for ``draws`` random sets of as
    many heads outside the group (:func:`random_head_sets`, ``seed``; ``random_change`` of their
    mean KL and ``random_change_by_draw``), and ``minus_random = after - mean of the random sets'
    after``: above 0 when ablating the group moves the model further from the reference than
    ablating random heads. All per-prompt, :func:`empirical.yardsticks.competence.paired`."""
    before = model_predictor(model, num_tokens, device)(tokens)
    references = {**references, UNABLATED: before}
    scopes = scope_rows(prompt_format)

    def divergences(probabilities: torch.Tensor) -> dict[str, dict[str, torch.Tensor]]:
        return {scope: {name: kl_per_prompt(reference, probabilities, tokens, num_tokens, rows)
                        for name, reference in references.items()} for scope, rows in scopes.items()}

    unablated = divergences(before)
    result = {"references": list(references), "before": {
        scope: {name: paired(values) for name, values in by_name.items()} for scope, by_name in unablated.items()},
        "groups": {}}
    for group, heads in groups.items():
        heads = check_heads(heads, model.config)
        random_sets = random_head_sets(model.config, len(heads), draws, heads, seed)
        after = divergences(ablated_probabilities(model, tokens, num_tokens, heads, means, device))
        random_after = [divergences(ablated_probabilities(model, tokens, num_tokens, chosen, means, device))
                        for chosen in random_sets]
        entry = {"heads": heads_json(heads), "random_heads": [heads_json(chosen) for chosen in random_sets]}
        for scope, by_name in after.items():
            entry[scope] = {}
            for name, ablated in by_name.items():
                base = unablated[scope][name]
                randoms = torch.stack([draw[scope][name] for draw in random_after])
                entry[scope][name] = {
                    "after": paired(ablated),
                    "change": paired(ablated - base),
                    "random_change": paired(randoms.mean(0) - base),
                    "random_change_by_draw": [paired(draw - base) for draw in randoms],
                    "minus_random": paired(ablated - randoms.mean(0)),
                }
        result["groups"][group] = entry
    return result


def excess_over_chance(scores: dict[str, ScoreSums], group: str) -> torch.Tensor:
    """``(L, H)``: the largest ``score - chance`` of each head over the scores whose names start
    with ``group`` (``previous-token``: offsets 1 and 2; ``induction``: orders 1 and 2); chance
    differs between offsets and orders, so a head is ranked by its excess, not its mass."""
    family = [sums.score - sums.chance_level for name, sums in scores.items() if name.startswith(f"{group} ")]
    if not family:
        raise ValueError(f"group: {group!r}; expected the start of a score name among {sorted(scores)}")
    return torch.stack(family).nan_to_num(nan=-math.inf).amax(0)


def select_heads(scores: dict[str, ScoreSums], group: str, count: int) -> list[Head]:
    """The ``count`` heads with the largest :func:`excess_over_chance` of ``group`` (ties: the
    earlier head), in decreasing order of excess."""
    excess = excess_over_chance(scores, group)
    count = _check_positive("count", count)
    if count > excess.numel():
        raise ValueError(f"count: {count}; expected at most the model's {excess.numel()} heads")
    ranked = torch.argsort(excess.flatten(), descending=True, stable=True)[:count]
    return [divmod(int(index), excess.shape[1]) for index in ranked]


COUNTS_FROM_ZERO = ("seed", "ceiling_particles")
"""The fields of :class:`HeadsSettings` that may be 0; the others are counts >= 1."""


@dataclass(frozen=True)
class HeadsSettings:
    """What :func:`heads_report` measures on (the options of ``hmmtf heads``); validated on
    construction (``top_heads`` against the model, where it is used)."""

    prompts: int = option(256, "fresh-HMM prompts scored and ablated (empirical.yardsticks.curves.fresh_prompts, the prompts "
                               "of hmmtf curve's probe)")
    reference_prompts: int = option(256, "other prompts of the same fresh HMMs, whose mean head outputs replace an "
                                         "ablated head")
    fresh_tasks: int = option(1024, "fresh HMMs the prompts come from (as many, of other streams, fit the n-grams)")
    top_heads: int = option(2, "heads per ablated group (largest excess over chance) and per random set; at most "
                               "half of the model's heads")
    random_draws: int = option(8, "random head sets per group")
    seed: int = option(0, "seed of the random-init RoFormer and of the random head sets")
    batch_size: int = option(64, "prompts per forward pass that records attention")
    ceiling_particles: int = option(CEILING_SETTINGS.particles, "SMC particles per replicate of the prior-predictive "
                                                                "ceiling, a reference of the ablation (minutes on the "
                                                                "paper's 16-state family); 0 skips the ceiling")

    def __post_init__(self) -> None:
        counts = tuple(field.name for field in dataclasses.fields(self) if field.name not in COUNTS_FROM_ZERO)
        check_integers(self, counts, minimum=1)
        check_integers(self, COUNTS_FROM_ZERO, minimum=0)


def heads_report(model: RoFormer, preset: ExperimentPreset, settings: HeadsSettings,
                 device: torch.device | str = "cpu") -> dict:
    """Scores of every head of ``model`` and of its random-init twin, the selected groups and the
    causal test against the in-context n-grams (:func:`empirical.yardsticks.competence.fitted_ngrams`), the
    ceiling (averaged :func:`empirical.yardsticks.competence.ceiling_estimates`, unless
    ``ceiling_particles`` is 0) and the unablated model, on fresh-HMM prompts of ``preset``
    (the checkpoint's); JSON-ready."""
    if settings.top_heads > model.config.num_layers * model.config.num_heads // 2:
        raise ValueError(f"top_heads: {settings.top_heads}; expected at most half of the model's "
                         f"{model.config.num_layers * model.config.num_heads} heads, so that as many other heads "
                         f"are left to draw the random sets from")
    fresh, prompts = fresh_prompts(preset, settings.prompts, settings.fresh_tasks)
    tokens, num_tokens, prompt_format = prompts.tokens, fresh.num_tokens, preset.prompt_format
    reference = hmm.sample_prompts(fresh, settings.reference_prompts, prompt_format,
                                   seed=stream_seed(preset.data_seed, FRESH_PROMPT_STREAM, REFERENCE_DRAW)).tokens
    networks = {"trained": model, "random-init": random_init_like(model, settings.seed).to(device)}
    scores = {network: head_scores(weights, tokens, num_tokens, device, settings.batch_size)
              for network, weights in networks.items()}
    groups = {group: select_heads(scores["trained"], group, settings.top_heads) for group in HEAD_GROUPS}
    references = {name: ngram(tokens) for name, ngram in fitted_ngrams(preset, settings.fresh_tasks).items()}
    ceiling = None
    if settings.ceiling_particles:
        estimates = ceiling_estimates(tokens, prompt_format, preset.mixture_spec,
                                      dataclasses.replace(CEILING_SETTINGS, particles=settings.ceiling_particles))
        references["ceiling"], ceiling = estimates.probabilities, estimates.record()
    means = mean_head_outputs(model, reference, device, settings.batch_size)
    ablation = ablation_effects(model, tokens, prompt_format, num_tokens, references, groups, means,
                                settings.random_draws, settings.seed, device)
    return {
        "settings": dataclasses.asdict(settings),
        "prompts": {"evaluated": f"fresh_prompts(preset, {settings.prompts}, {settings.fresh_tasks}): draw 0 of "
                                 f"stream {FRESH_PROMPT_STREAM}",
                    "reference": f"{settings.reference_prompts} prompts of the same HMMs, draw {REFERENCE_DRAW} of "
                                 f"stream {FRESH_PROMPT_STREAM}",
                    "length": prompt_format.length},
        "scores": {network: {name: sums.summary() for name, sums in by_name.items()}
                   for network, by_name in scores.items()},
        "selection": {group: {"heads": heads_json(heads),
                              "excess": [float(excess_over_chance(scores["trained"], group)[head]) for head in heads],
                              "random_init_best_excess": float(excess_over_chance(scores["random-init"], group).max()),
                              "rule": f"the {settings.top_heads} heads with the largest max over the {group} scores "
                                      f"of score - chance"}
                      for group, heads in groups.items()},
        "ceiling": ceiling,
        "ablation": ablation,
    }
