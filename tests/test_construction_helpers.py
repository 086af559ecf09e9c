"""Helpers shared by the tests/test_construction_*.py modules, and checks of the helpers."""
import numpy as np

import hmm
from construction import reference
from rounding import gamma


def hmm_prompt(p: int, demo_lengths: list[int], test_length: int, seed: int, num_states: int = 3) -> np.ndarray:
    """demo_1, p, ..., demo_n, p, test: every segment an independent run of one random HMM."""
    model = hmm.random_hmm(num_states, p, seed=seed)
    lengths = list(demo_lengths) + [test_length]
    runs, _ = hmm.sample_sequences(model, np.zeros(len(lengths), dtype=int), max(lengths), seed=seed + 1)
    pieces = []
    for run, length in zip(runs.numpy(), demo_lengths):
        pieces += [run[:length], [p]]
    pieces.append(runs.numpy()[-1][:test_length])
    return np.concatenate(pieces).astype(np.int64)


def pass_rounding(tokens: np.ndarray, spec) -> tuple[np.ndarray, float]:
    """How far one float64 pass of the network built from ``spec`` can be from the same network in
    exact arithmetic (first order in the unit roundoff u): ``(weights, readout)``, where
    ``weights[t]`` bounds ``||Delta W_t||_F`` of the copy of W after layer gd.t (t = 0..T) and
    ``readout`` the rounding an output entry adds beyond ``||Delta W_T||_F ||x_i||_2``.

    Weights (:data:`construction.weights.SCALED_WEIGHTS`: each scaled entry is one correctly
    rounded product, as in the builders) and elementwise operations are correctly rounded. A sum
    of n terms computed in any order is within ``gamma_n`` of the sum of its terms' magnitudes; no
    sum the network forms is longer than ``n = N + pL + L + 3`` (N keys; a GD key reads
    ``pL + L + 2`` rows; 2p heads). Magnitudes come from the reference iterates ``W_t`` (equal to
    the network's to the construction error, 1e-9, which changes no digit). The plain-numpy
    reference iterates (:func:`construction.reference.gd_iterates`) form the same sums from exact
    features, none longer, so they are within the same bounds of exact arithmetic.

    * Features: a history or label coordinate is a sum of nonnegative terms (softmax weight times
      a copied 0/1 coordinate) passed through at most L copies, so its relative error is at most
      ``L gamma_n``. (D of a sample is leak-sized with the same relative error; its effect,
      ``penalty * D``, is of order ``eps gamma_n`` and is dropped.)
    * GD step t, entry (k, a): the pair writes ``-(eta/N) sum_j x_ja r_jk``, ``r_jk = <w_k, x_j> - y_jk``;
      rounding the residual (with its feature errors), the sum over the keys and the residual add
      gives ``local_t(k, a) <= (L + 2) gamma_n [|W_t(k, a)| + (eta/N) sum_j x_ja (sum_b |W_{t-1}(k, b)| x_jb + |y_jk| + |r_jk|)]``.
    * Propagation: an error E of W is mapped to ``E (I - eta H)``, eigenvalues in [0, 1] for
      ``eta = 1/lambda_max``, so ``||Delta W_T||_F <= sum_t ||local_t||_F``.
    * Read-out: entry k of a column is ``<w_k, x_i>`` averaged over N equal terms, so it errs by
      ``||Delta W_T||_F ||x_i||_2 + (L + 2) gamma_n sum_a |W_T(k, a)| x_ia``, ``||x_i||_2 <= sqrt(L)``.
    """
    p, history_length, steps = spec.num_tokens, spec.history_length, spec.gd_steps
    num_columns = len(tokens) + 1
    factor = (history_length + 2) * gamma(num_columns + p * history_length + history_length + 3)
    X, Y, _ = reference.regression_problem(tokens, p, history_length)
    iterates = reference.gd_iterates(X, Y, spec.eta, steps, num_columns)
    step = spec.eta / num_columns
    local = [0.0]
    for t in range(1, steps + 1):
        previous = np.abs(iterates[t - 1])
        residual = np.abs(iterates[t - 1] @ X.T - Y.T)
        magnitudes = np.abs(iterates[t]) + step * (previous @ X.T + Y.T + residual) @ X
        local.append(factor * np.linalg.norm(magnitudes))
    features = reference.history(tokens, p, history_length)[:, :, :p].reshape(num_columns, -1)
    readout = factor * (np.abs(iterates[-1]) @ features.T).max()
    return np.cumsum(local), float(readout)


def pass_rounding_bound(tokens: np.ndarray, spec) -> float:
    """Bound on ``|a - b|`` for every output entry of every column, where a and b come from two
    float64 computations of the network's output on one prompt that differ only in the order of
    the terms of their sums (two passes, or a pass and the plain-numpy reference): each is within
    ``E = ||Delta W_T||_F sqrt(L) + readout`` of exact arithmetic (:func:`pass_rounding`;
    ``||x_i||_2 <= sqrt(L)``), so the two are within 2E."""
    weights, readout = pass_rounding(tokens, spec)
    return 2 * (weights[-1] * np.sqrt(spec.history_length) + readout)


def test_hmm_prompt_follows_the_prompt_format():
    tokens = hmm_prompt(4, [5, 7, 3], 6, seed=0)
    assert tokens.shape == (5 + 1 + 7 + 1 + 3 + 1 + 6,)
    assert np.array_equal(np.flatnonzero(tokens == 4), [5, 13, 17])
    assert tokens.min() >= 0 and tokens.max() <= 4


def test_hmm_prompt_matches_hmm_sample_prompts_for_equal_lengths():
    """With equal demonstration lengths the delimiters sit where hmm.sample_prompts puts them."""
    fmt = hmm.PromptFormat(3, 6, 4)
    sampled = hmm.sample_prompts(hmm.Mixture.single(hmm.random_hmm(3, 4, seed=0)), 1, fmt, seed=0).tokens[0].numpy()
    ours = hmm_prompt(4, [6, 6, 6], 4, seed=0)
    assert np.array_equal(sampled == 4, ours == 4)
