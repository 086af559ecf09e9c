"""The hand-built network as an in-context predictor, beside the predictors it approximates
(docs/empirical.md, "Hand-built and trained side by side"; Theorem 1 in docs/construction.md, 0.4).

Three predictors with the signature of :data:`empirical.yardsticks.evaluate.Predictor`, for a history length
L and prompts of one format:

* :func:`task_memory_predictor`: ``P_L``, the exact L-memory predictor of each prompt's own HMM
  (an oracle that knows the task, as ``P_L`` of Lemma 1 and Theorem 1 does);
* :func:`least_squares_predictor`: ``W+ x_t``, the minimum-norm least-squares solution on the
  prompt's in-context samples (the *generalization* step of Theorem 1);
* :func:`hand_built_predictor`: ``W_T x_t``, the network of :mod:`construction` built for the
  prompt by ``parameters_for_prompt`` (T gradient-descent layers from ``W_0 = 0``).

**Which rows.** The samples are those of the construction (docs/construction.md, section 3):
token i (0-based offset) of a demonstration of length l with ``L - 1 <= i <= l - 2``, covariate
``x = [e(o_i); ...; e(o_{i-L+1})]``, target ``e(o_{i+1})``. A row t (the prediction of token
t + 1) is *served* when t lies in segment ``k >= 1`` (after at least one demonstration: with none
there is no sample) at offset ``>= L - 1`` (its L-history lies inside the segment). For a row in
segment k both regressions use the samples of the first k demonstrations only, so no row sees
its own segment's future. Unserved rows are NaN; :func:`served_rows` lists the served ones, and
``evaluate_predictors(..., rows=...)`` evaluates only those.

**One pass per segment, not per row.** The network's read-out writes ``W_T x_c`` into *every*
column c, and ``W_T`` depends only on the samples: with ``eta = 1/lambda_max((1/N) X^T X)`` the
GD step ``eta/N = 1/lambda_max(X^T X)`` does not depend on N. So one pass over the prefix "first
k demonstrations, then segment k in full as the test sequence" gives, in the column of every
token of segment k, the prediction the network makes on the prompt cut after that token (within
the two prompts' construction-error bounds, 1e-9 each; a later token reaches an earlier column
only through the softmax leak, which those bounds contain). The vs-position curve then costs one
pass per prompt (k = n, the whole prompt) and the vs-demonstrations curve n passes of growing
length: with the cost of a pass growing as N^2, 2.8 whole-prompt passes for the cpu-small format,
where one pass per served row would cost 34.

**Distribution rule** (:func:`to_distribution`): the raw outputs ``v = W x`` of the two
regressions are not distributions (entries can be negative, sums differ from 1 off the span of
the samples), so each row becomes ``q = (1 - eps) max(v, 0) / sum max(v, 0) + eps / p`` (the
uniform distribution where no entry is positive), ``eps =`` :data:`SMOOTHING`.
"""
from __future__ import annotations

import torch
from tqdm import tqdm

import construction
import hmm
from empirical.yardsticks.evaluate import Predictor
from hmm.memory import least_squares, memory_predictor, one_hot_history

SMOOTHING = 0.01
"""``eps`` of :func:`to_distribution`: the mass given to the uniform distribution, so every token
gets at least ``eps / p``. A row that already is a distribution loses at most ``-log(1 - eps) =
0.01`` nats on any token; a token the raw output rules out costs at most ``log(p / eps)`` (6.7
nats for p = 8) instead of infinity (docs/empirical.md)."""

HAND_BUILT_BATCH = 4
"""Prompts per :func:`construction.forward_batch` call. On 2 shared CPU cores 1 and 4 run about
equally fast (4 was faster under load) and 16 slower: larger batches push the
``(B, heads, N, N)`` attention tensors out of the cache (``benchmarks/bench_hand_built.py``)."""


def to_distribution(raw: torch.Tensor, smoothing: float = SMOOTHING) -> torch.Tensor:
    """``(..., p)``: each row ``v`` of ``raw`` mapped to ``(1 - eps) max(v, 0) / sum max(v, 0) + eps / p``
    (the uniform distribution where no entry is positive); NaN rows stay NaN.

    Every row sums to 1 with entries ``>= eps / p``, and the argmax is the raw argmax wherever an
    entry is positive (ties broken toward the smaller index).
    """
    if not 0.0 < smoothing <= 1.0:
        raise ValueError(f"smoothing: {smoothing!r}; expected a mass in (0, 1]")
    num_tokens = raw.shape[-1]
    positive = raw.clamp_min(0.0)
    total = positive.sum(-1, keepdim=True)
    shape = torch.where(total > 0, positive / total, 1.0 / num_tokens)
    distribution = (1.0 - smoothing) * shape + smoothing / num_tokens
    return distribution.masked_fill(raw.isnan().any(-1, keepdim=True), float("nan"))


def check_format(prompt_format: hmm.PromptFormat, history_length: int) -> None:
    """``ValueError`` unless every demonstration yields a regression sample (``demo_length >= L + 1``),
    the test sequence holds an L-history (``test_length >= L``) and there is a demonstration."""
    if isinstance(history_length, bool) or not isinstance(history_length, int) or history_length < 1:
        raise ValueError(f"history_length L: {history_length!r}; expected an integer >= 1")
    fmt = prompt_format
    if fmt.num_demos < 1 or fmt.demo_length < history_length + 1 or fmt.test_length < history_length:
        raise ValueError(
            f"prompt_format: num_demos={fmt.num_demos}, demo_length={fmt.demo_length}, test_length={fmt.test_length} "
            f"for L={history_length}; expected num_demos >= 1, demo_length >= L + 1 (a regression sample per "
            f"demonstration) and test_length >= L"
        )


def served_rows(prompt_format: hmm.PromptFormat, history_length: int) -> torch.Tensor:
    """``(length,)`` bool: the rows t the L-history predictors serve, those in segment ``k >= 1``
    at offset ``>= L - 1`` of their segment (module docstring)."""
    check_format(prompt_format, history_length)
    return (prompt_format.segment_index >= 1) & (prompt_format.position_in_segment >= history_length - 1)


def segments(prompt_format: hmm.PromptFormat) -> list[tuple[int, int]]:
    """``[(start, stop)]`` of segment k = 0..n (demonstrations, then the test sequence)."""
    fmt = prompt_format
    bounds = [(k * (fmt.demo_length + 1), k * (fmt.demo_length + 1) + fmt.demo_length) for k in range(fmt.num_demos)]
    start = fmt.num_demos * (fmt.demo_length + 1)
    return bounds + [(start, start + fmt.test_length)]


def _check_tokens(tokens: torch.Tensor, prompt_format: hmm.PromptFormat) -> None:
    if tokens.ndim != 2 or tokens.shape[1] != prompt_format.length:
        raise ValueError(f"tokens: shape {tuple(tokens.shape)}; expected (B, {prompt_format.length}) for {prompt_format}")


def task_memory_predictor(mixture: hmm.Mixture, task_ids: torch.Tensor, prompt_format: hmm.PromptFormat,
                          history_length: int | None, prior="stationary") -> Predictor:
    """``P_L`` of each prompt's own HMM (``task_ids[b]`` generated prompt b), every row served.

    Row t in a segment is :func:`hmm.memory.memory_predictor` of the segment's tokens up to t:
    every segment restarts the HMM from its initial law, so a window that reaches the segment's
    start is filtered from that law (``P_L`` is exact there) and a longer one restarts from
    ``prior``. A delimiter row predicts the first token of the next segment, ``mu^T O``. Needs
    ``L <= `` every segment's length (refused by :func:`hmm.memory.memory_predictor` otherwise).
    ``history_length=None`` takes each segment's whole length as L: every window reaches the
    segment's start, so the rows are the exact predictive of the prompt's own HMM (the oracle of
    :mod:`empirical.yardsticks.regime`), all prompts filtered in one batch.
    """

    def predict(tokens: torch.Tensor) -> torch.Tensor:
        _check_tokens(tokens, prompt_format)
        if tokens.shape[0] != len(task_ids):
            raise ValueError(f"tokens: {tokens.shape[0]} prompts; expected one per task id ({len(task_ids)})")
        model = mixture.hmm[task_ids.to(mixture.hmm.device)]
        first = (model.initial[:, None, :] @ model.emission).squeeze(1).double().cpu()
        probabilities = torch.empty(*tokens.shape, mixture.num_tokens, dtype=torch.float64)
        for start, stop in segments(prompt_format):
            window = tokens[:, start:stop].to(mixture.hmm.device)
            length = stop - start if history_length is None else history_length
            probabilities[:, start:stop] = memory_predictor(model, window, length, prior).double().cpu()
            if start > 0:
                probabilities[:, start - 1] = first
        return probabilities

    return predict


def _samples(features: torch.Tensor, segment_tokens: torch.Tensor, history_length: int,
             num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Covariates ``(B, l - L, pL)`` and one-hot targets ``(B, l - L, p)`` of one demonstration."""
    stop = segment_tokens.shape[1] - 1
    targets = torch.nn.functional.one_hot(segment_tokens[:, history_length:], num_tokens).double()
    return features[:, history_length - 1 : stop], targets


def least_squares_outputs(tokens: torch.Tensor, prompt_format: hmm.PromptFormat, num_tokens: int,
                          history_length: int) -> torch.Tensor:
    """``(B, N, p)``: ``W+_k x_t`` on the served rows (NaN elsewhere), ``W+_k`` the minimum-norm
    least-squares solution (:func:`hmm.memory.least_squares`) on the samples of the first k
    demonstrations for a row in segment k, ``x_t`` the row's one-hot L-history."""
    check_format(prompt_format, history_length)
    _check_tokens(tokens, prompt_format)
    outputs = torch.full((*tokens.shape, num_tokens), float("nan"), dtype=torch.float64)
    bounds = segments(prompt_format)
    features = [one_hot_history(tokens[:, start:stop], history_length, num_tokens) for start, stop in bounds]
    samples = [_samples(features[k], tokens[:, start:stop], history_length, num_tokens)
               for k, (start, stop) in enumerate(bounds[:-1])]
    for k, (start, stop) in enumerate(bounds[1:], start=1):
        X = torch.cat([covariates for covariates, _ in samples[:k]], dim=1)
        Y = torch.cat([targets for _, targets in samples[:k]], dim=1)
        W = least_squares(X, Y)
        outputs[:, start + history_length - 1 : stop] = features[k][:, history_length - 1 :] @ W.mT
    return outputs


def hand_built_outputs(tokens: torch.Tensor, prompt_format: hmm.PromptFormat, num_tokens: int, history_length: int,
                       gd_steps: int, batch_size: int = HAND_BUILT_BATCH, target: float = 1e-9) -> torch.Tensor:
    """``(B, N, p)``: the hand-built network's ``W_T x_t`` on the served rows (NaN elsewhere).

    For k = 1..n, one :func:`construction.forward_batch` pass over the prefix "first k
    demonstrations, then segment k" of every prompt, each with its own spec
    ``parameters_for_prompt(prefix, p, L, T, target=target)``; row t of segment k is the
    ``output`` slot of column t + 1 (module docstring).
    """
    check_format(prompt_format, history_length)
    _check_tokens(tokens, prompt_format)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: {batch_size!r}; expected an integer >= 1")
    outputs = torch.full((*tokens.shape, num_tokens), float("nan"), dtype=torch.float64)
    prompts = tokens.cpu().numpy()
    jobs = [(k, start, stop, chunk) for k, (start, stop) in enumerate(segments(prompt_format)[1:], start=1)
            for chunk in range(0, len(prompts), batch_size)]
    for k, start, stop, chunk in tqdm(jobs, desc=f"hand-built L={history_length} T={gd_steps}", unit="pass",
                                      leave=False):
        prefixes = prompts[chunk : chunk + batch_size, :stop]
        specs = [construction.parameters_for_prompt(prefix, num_tokens, history_length, gd_steps, target=target)
                 for prefix in prefixes]
        written = construction.forward_batch(specs, prefixes, tolerance=target).slot("output")
        first = start + history_length - 1
        outputs[chunk : chunk + batch_size, first:stop] = written[:, :, first + 1 : stop + 1].mT
    return outputs


def least_squares_predictor(prompt_format: hmm.PromptFormat, num_tokens: int, history_length: int,
                            smoothing: float = SMOOTHING) -> Predictor:
    """:func:`to_distribution` of :func:`least_squares_outputs`."""
    check_format(prompt_format, history_length)
    return lambda tokens: to_distribution(least_squares_outputs(tokens, prompt_format, num_tokens, history_length),
                                          smoothing)


def hand_built_predictor(prompt_format: hmm.PromptFormat, num_tokens: int, history_length: int, gd_steps: int,
                         batch_size: int = HAND_BUILT_BATCH, smoothing: float = SMOOTHING) -> Predictor:
    """:func:`to_distribution` of :func:`hand_built_outputs`."""
    check_format(prompt_format, history_length)
    return lambda tokens: to_distribution(
        hand_built_outputs(tokens, prompt_format, num_tokens, history_length, gd_steps, batch_size), smoothing)


def side_by_side_predictors(mixture: hmm.Mixture, prompts: hmm.Prompts, history_lengths: list[int],
                            gd_steps: list[int], batch_size: int = HAND_BUILT_BATCH) -> dict[str, Predictor]:
    """For every L of ``history_lengths``: ``P_L L=..``, ``least squares L=..`` and, for every T of
    ``gd_steps``, ``hand-built L=.. T=..``, all for ``prompts`` (P_L reads their task ids)."""
    predictors: dict[str, Predictor] = {}
    fmt, p = prompts.format, mixture.num_tokens
    for L in history_lengths:
        predictors[f"P_L L={L}"] = task_memory_predictor(mixture, prompts.task_ids, fmt, L)
        predictors[f"least squares L={L}"] = least_squares_predictor(fmt, p, L)
        for T in gd_steps:
            predictors[f"hand-built L={L} T={T}"] = hand_built_predictor(fmt, p, L, T, batch_size)
    return predictors
