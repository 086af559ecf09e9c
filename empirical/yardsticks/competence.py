"""How good a trained network is on HMMs it never saw, before anything is said about its mechanism.

``hmmtf evaluate``'s competence result (``competence.json`` beside ``evaluation.json``;
``docs/empirical.md``, "Competence"). On prompts of fresh HMMs (the regime section's: the
preset's generator, :data:`empirical.yardsticks.regime.FRESH_MIXTURE_STREAM`, prompts of
:data:`empirical.yardsticks.regime.FRESH_PROMPT_STREAM`) it scores a ladder of predictors:

* ``unigram``: the training mixture's token frequencies (context-free);
* ``ngram 1``, ``ngram 2``, ``ngram 3``: in-context n-grams (:mod:`empirical.yardsticks.ngram`) whose
  concentrations are fitted on :data:`FIT_PROMPTS` prompts of *other* fresh HMMs
  (:data:`FIT_MIXTURE_STREAM`, prompts :data:`FIT_PROMPT_STREAM`): no evaluated prompt and no
  evaluated HMM is used to fit them;
* ``variable order``: context-tree weighting of depth :data:`VARIABLE_ORDER_DEPTH` over the prompt's
  own tokens (:mod:`empirical.yardsticks.variable_order`), a mixture over every variable-order
  context tree that holds the in-context n-grams of orders 1 to 7 as special cases, its
  concentrations fitted on the same prompts by the same protocol;
* ``model``: the network;
* ``hand-built``: the paper's construction (:func:`empirical.yardsticks.hand_built.hand_built_predictor`) on
  the rows it serves (a separate table, as it skips each segment's first L - 1 rows);
* ``ceiling``: the posterior predictive under the generator's prior (:mod:`hmm.prior_predictive`),
  the best any predictor of the prompt alone can do; computed as :data:`CEILING_REPLICATES`
  independent SMC runs whose predictive distributions are averaged, their spread giving the
  Monte-Carlo error. Where that SMC does not converge (128 states), the ``collapsed`` backend
  (:mod:`hmm.collapsed_smc`, :data:`COLLAPSED_CEILING_SETTINGS`) gives an **upper bound** instead:
  each replicate, and their average, is a predictor of the prompt alone, so its expected loss is at
  least the ceiling's (``benchmarks/ceiling_bounds.py``). The result then says so
  (``ceiling.upper_bound``), and for a model ahead of the in-context unigram the ``gap_closed`` it
  reports is at least the share of the window to the true ceiling that the model closes (the
  window to the bound is the narrower);
* ``oracle``: each prompt's own HMM (not reachable from the prompt).

**Decision rule** (fixed before any result). Per prompt b, ``d_b = loss_model(b) - loss_n(b)``
(mean over the scope's rows of that prompt); the model *beats* the in-context n-gram of order n in
a scope when the 95% interval ``mean(d) +- 1.96 s.e.`` lies below 0, and beats the
variable-order predictor by the same test on ``loss_model(b) - loss_variable_order(b)``. The
scopes are the test sequence and all positions. The verdict is

* ``beats every in-context predictor``: it beats orders 1, 2 and 3 and the variable-order
  predictor in both scopes;
* ``beats every in-context n-gram``: orders 1, 2 and 3 in both scopes, not the variable-order
  predictor (or a result made before it existed);
* ``beats the in-context bigram``: orders 1 and 2 in both scopes, not order 3;
* ``beats the in-context unigram``: order 1 in both scopes, not order 2;
* ``at the in-context-unigram level``: otherwise.

A model is **competent** for mechanism claims (:mod:`ledger.ladder`) when it beats the in-context
bigram in both scopes and, where the result scores it, the variable-order predictor in both
scopes (:func:`is_competent`). Beside the verdict, the fraction of the gap from the in-context unigram
to the ceiling that the model closes::

    closed = mean_b(loss_1(b) - loss_model(b)) / mean_b(loss_1(b) - loss_ceiling(b))

with a delta-method 95% interval over prompts (the ceiling's own Monte-Carlo error is reported
next to it).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

import hmm
from empirical.training.presets import ExperimentPreset
from empirical.yardsticks.evaluate import Evaluation, Predictor, evaluate_predictors
from empirical.yardsticks.hand_built import hand_built_predictor, served_rows
from empirical.yardsticks.ngram import InContextNGram, scored_rows
from empirical.yardsticks.regime import Z_95, fresh_prompts, oracle_predictor
from empirical.yardsticks.variable_order import ContextTreeWeighting
from hmm import prior_predictive_torch
from hmm.collapsed_smc import CollapsedSMCSettings, collapsed_prior_predictive
from hmm.prior_predictive import DirichletHMMPrior, SMCSettings, prior_predictive

NGRAM_ORDERS = (1, 2, 3)
"""Orders of the in-context n-gram baselines."""
FIT_MIXTURE_STREAM = 11
"""Seed stream of the fresh HMMs whose prompts fit the n-grams' concentrations."""
FIT_PROMPT_STREAM = 12
"""Seed stream of the fitting prompts."""
FIT_PROMPTS = 512
"""Prompts the n-grams' concentrations are fitted on."""
VARIABLE_ORDER = "variable order"
"""The name of the variable-order predictor (:func:`fitted_in_context`) in every result."""
VARIABLE_ORDER_DEPTH = 6
"""Depth of its context trees: contexts of up to six tokens (issue 65), twice the trigram's."""
CEILING_REPLICATES = 2
"""Independent SMC runs averaged into the ceiling (their differences give its Monte-Carlo error)."""
CEILING_SETTINGS = SMCSettings(particles=256, moves=2)
"""Each replicate's SMC: 256 particles, two Gibbs sweeps per rejuvenation. The sweeps matter as
much as the particles: on the first 32 prompts, a replicate of 128 particles and one sweep lost
0.0056 nats more than the average of two (twice the Jensen term of averaging estimates inside a
log), one of 256 particles and four sweeps 0.0017. Its convergence check (doubling both) is in
``figures/competence/prior_predictive.json``; ``docs/empirical.md``, "Competence numbers"."""
COLLAPSED_CEILING_SETTINGS = CollapsedSMCSettings(particles=128, burn_in_steps=8)
"""Each replicate of the collapsed backend's bound: 128 particles and K = 8 burn-in steps, the
settings of the committed bounds at 128 states (``figures/competence/ceiling-paper.json``; chosen on
a pilot of 32 other prompts: at equal CPU, many runs of 128 particles bound tighter than fewer of
more, ``docs/hmm.md``)."""
COLLAPSED_CEILING_REPLICATES = 16
"""Replicates averaged into the collapsed backend's bound (the pilot's 16 x 128)."""
COMPETENCE_CEILING_KEYS = ("particles", "moves", "replicates", "ess_threshold", "seed", "seconds", "cached")
"""The entries of :meth:`Ceiling.record` that competence.json's ``ceiling`` holds, in its order (the
committed results' bytes: no ``batch_prompts``)."""
COLLAPSED_CEILING_KEYS = ("backend", "particles", "burn_in_steps", "sweeps", "replicates", "ess_threshold", "seed",
                          "seconds", "cached")
"""The same for the collapsed backend's bound."""
CEILING_METHODS = {
    "numpy": "resample-move SMC (IBIS) over (T, O), FFBS Gibbs moves, MH for the stationary start",
    "collapsed": "collapsed-path SMC over hidden paths (Dirichlet-multinomial counts of the visited states, K hidden "
                 "burn-in steps for the stationary start); the average of the replicates is an upper bound on the "
                 "ceiling's loss, not an estimate of it",
}
"""What competence.json's ``ceiling.method`` says, by backend."""
CEILING_BOUND = "ceiling bound"
"""The name of the collapsed SMC's upper bound where it is scored beside other predictors rather than
as the ceiling (``hmmtf ngram-verdict``, ``hmmtf family-calibration``): the average of its runs, a
predictor of the prompt alone whose expected loss is at least the ceiling's."""
HAND_BUILT_NETWORK = {"history_length": 2, "gd_steps": 32}
"""The hand-built network on the ladder: L = 2 (the in-context bigram's history), T = 32."""
RULE = ("per prompt, d = loss(model) - loss(in-context n-gram), each the mean over the scope's rows; the model beats "
        "order n in a scope when the 95% interval of mean(d) lies below 0 (scopes: test sequence, all positions); "
        "verdict: 'beats every in-context n-gram' (orders 1, 2, 3 in both scopes), else 'beats the in-context bigram' "
        "(orders 1, 2), else 'beats the in-context unigram' (order 1), else 'at the in-context-unigram level'; "
        "competent for mechanism claims: beats the in-context bigram")
"""The module docstring's decision rule for the n-grams, recorded in every result (as written before the
variable-order predictor existed, so that a result made then and one made now state it alike)."""
VARIABLE_ORDER_RULE = ("extends rule: the variable-order predictor (context-tree weighting of depth 6) is beaten in a "
                       "scope as an n-gram is, when the 95% interval of mean(d) lies below 0; verdict above 'beats "
                       "every in-context n-gram': 'beats every in-context predictor' (orders 1, 2, 3 and the "
                       "variable-order predictor in both scopes); competent for mechanism claims: beats the "
                       "in-context bigram and the variable-order predictor")
"""The rule's extension to the variable-order predictor, recorded beside it in every result that scores it."""
COMPETENT = "beats the in-context bigram"
BEATS_EVERY_NGRAM = "beats every in-context n-gram"
BEATS_EVERY_PREDICTOR = "beats every in-context predictor"
VERDICTS = ("at the in-context-unigram level", "beats the in-context unigram", COMPETENT, BEATS_EVERY_NGRAM)
"""The n-gram verdicts in increasing order, as :data:`RULE` states them: ``VERDICTS[k]``, beats orders
``1..k`` in both scopes."""
RANKED_VERDICTS = (*VERDICTS, BEATS_EVERY_PREDICTOR)
"""Every verdict in increasing order: :data:`VERDICTS`, then the variable-order predictor beaten too
(:data:`VARIABLE_ORDER_RULE`)."""


@dataclass(frozen=True)
class Competence:
    """The competence result (module docstring), as ``competence.json`` holds it after its provenance:
    the decision ``rule`` in words; the fresh HMMs and prompts; the n-grams' fitted concentrations
    and where they were fitted (``ngram_fit``); the ceiling's method, settings, speed and Monte-Carlo
    error by scope; the hand-built network's L and T; the ``ladder`` on every row and the
    ``hand_built`` table on the rows it serves; the variable-order predictor's depth and
    concentrations (``variable_order``); by scope, the paired differences ``"model - NAME"``
    and ``"ceiling - oracle"`` (:func:`paired`), which n-grams the model ``beats`` and the
    ``gap_closed`` (:func:`gap_closed`); the ``verdict`` and whether it is ``competent``."""

    rule: str
    variable_order_rule: str
    fresh_tasks: int
    num_prompts: int
    ngram_concentrations: dict[str, list[float]]
    ngram_fit: dict[str, int]
    variable_order: dict
    ceiling: dict
    hand_built_network: dict[str, int]
    ladder: Evaluation
    hand_built: Evaluation
    comparisons: dict[str, dict[str, dict]]
    beats: dict[str, dict[str, bool]]
    gap_closed: dict[str, dict]
    verdict: str
    competent: bool


def fitting_prompts(preset: ExperimentPreset, fresh_tasks: int) -> tuple[int, torch.Tensor]:
    """``(p, tokens)``: the :data:`FIT_PROMPTS` prompts of ``fresh_tasks`` HMMs of the fitting streams
    (module docstring) that every in-context predictor's concentrations are fitted on."""
    fitting, prompts = fresh_prompts(preset, FIT_PROMPTS, fresh_tasks, FIT_MIXTURE_STREAM, FIT_PROMPT_STREAM)
    return fitting.num_tokens, prompts.tokens


def fitted_ngrams(preset: ExperimentPreset, fresh_tasks: int, orders=NGRAM_ORDERS) -> dict[str, InContextNGram]:
    """``{"ngram n": ...}`` with concentrations fitted on :func:`fitting_prompts`."""
    num_tokens, tokens = fitting_prompts(preset, fresh_tasks)
    return {f"ngram {n}": InContextNGram.fitted(n, num_tokens, tokens) for n in orders}


def fitted_in_context(preset: ExperimentPreset, fresh_tasks: int) -> dict[str, InContextNGram | ContextTreeWeighting]:
    """The in-context predictors the model is compared with, fitted on :func:`fitting_prompts` by one
    protocol: ``{"ngram n": ...}`` of :data:`NGRAM_ORDERS` and, as :data:`VARIABLE_ORDER`, context-tree
    weighting of depth :data:`VARIABLE_ORDER_DEPTH`."""
    num_tokens, tokens = fitting_prompts(preset, fresh_tasks)
    return {**{f"ngram {n}": InContextNGram.fitted(n, num_tokens, tokens) for n in NGRAM_ORDERS},
            VARIABLE_ORDER: ContextTreeWeighting.fitted(VARIABLE_ORDER_DEPTH, num_tokens, tokens)}


def cached(predictor: Predictor) -> Predictor:
    """``predictor`` computed once for the last tokens it saw (the SMC is costly; the same prompts
    are scored in more than one table)."""
    memory: dict[str, torch.Tensor] = {}

    def predict(tokens: torch.Tensor) -> torch.Tensor:
        if "tokens" not in memory or not torch.equal(memory["tokens"], tokens):
            memory["tokens"], memory["output"] = tokens, predictor(tokens)
        return memory["output"]

    return predict


class Ceiling(NamedTuple):
    """The ceiling on some prompts: independent SMC replicates and what they cost."""

    replicates: list[torch.Tensor]
    """Each ``(B, N, p)``: one SMC estimate of the prior predictive."""
    settings: SMCSettings | CollapsedSMCSettings
    """The first replicate's settings (replicate r has seed ``settings.seed + r``)."""
    seconds: float
    """Wall time of the SMC runs that computed them (also when read back from the cache)."""
    cached: bool
    """Read from :data:`CACHE_VARIABLE`'s directory rather than computed in this process."""
    backend: str = "numpy"
    """:data:`BACKEND_SOURCES` entry that computed them: ``"numpy"``, ``"collapsed"``, or
    ``"torch <device> <dtype>"``."""

    @property
    def probabilities(self) -> torch.Tensor:
        """``(B, N, p)``: the replicates averaged, the ceiling the results use."""
        return torch.stack(self.replicates).mean(0)

    @property
    def upper_bound(self) -> bool:
        """Whether :attr:`probabilities` bound the ceiling's loss from above rather than estimate it
        (the collapsed backend: module docstring)."""
        return self.backend == "collapsed"

    def record(self) -> dict:
        """The settings, replicate count, seconds and cache flag, as results record them, and the
        backend unless numpy's (so that the numpy SMC's records read as they always have)."""
        return {**dataclasses.asdict(self.settings), "replicates": len(self.replicates), "seconds": self.seconds,
                "cached": self.cached, **({} if self.backend == "numpy" else {"backend": self.backend})}


def ceiling_bound_record(bound: Ceiling, num_prompts: int) -> dict:
    """What a result records of the collapsed SMC's bound scored as :data:`CEILING_BOUND` on
    ``num_prompts`` prompts: its method, :meth:`Ceiling.record` and its speed in prompts a minute."""
    return {"method": CEILING_METHODS["collapsed"], **bound.record(),
            "prompts_per_minute": num_prompts * 60 / bound.seconds}


CACHE_VARIABLE = "HMMTF_CEILING_CACHE"
"""Environment variable naming a directory where :func:`ceiling_estimates` keeps what it computes, by content."""
SMC_SOURCES = ("hmm/prior_predictive.py", "hmm/particle_filter.py", "hmm/markov.py")
"""The modules the numpy SMC's numbers come from; their bytes are part of the cache key."""
TORCH_SMC_SOURCES = ("hmm/prior_predictive.py", "hmm/prior_predictive_torch.py", "hmm/markov.py")
"""The modules the torch SMC's numbers come from."""
COLLAPSED_SMC_SOURCES = ("hmm/collapsed_smc.py", "hmm/prior_predictive.py", "hmm/markov.py")
"""The modules the collapsed SMC's numbers come from."""
BACKEND_SOURCES = {"numpy": SMC_SOURCES, "torch": TORCH_SMC_SOURCES, "collapsed": COLLAPSED_SMC_SOURCES}
"""The SMCs :func:`ceiling_estimates` runs, by backend: :mod:`hmm.prior_predictive`,
:mod:`hmm.prior_predictive_torch`, :mod:`hmm.collapsed_smc` (an upper bound: :attr:`Ceiling.upper_bound`),
each with the modules its numbers come from (part of the cache key)."""


def _cache_key(tokens: torch.Tensor, prompt_format: hmm.PromptFormat, prior: DirichletHMMPrior,
               settings: SMCSettings | CollapsedSMCSettings, replicates: int, backend: str = "numpy") -> str:
    """SHA-256 of everything the replicates depend on: the prompts, the format, the prior, the SMC
    settings, the replicate count, the SMC's source files and the numpy and torch versions, and
    the backend (:attr:`Ceiling.backend`) unless numpy's, whose keys stay as they were."""
    digest = hashlib.sha256(tokens.numpy().astype("int64").tobytes())
    digest.update(repr((tuple(tokens.shape), dataclasses.asdict(prompt_format), dataclasses.asdict(prior),
                        dataclasses.asdict(settings), replicates, np.__version__, torch.__version__)).encode())
    if backend != "numpy":
        digest.update(backend.encode())
    root = Path(hmm.__file__).resolve().parents[1]
    for source in BACKEND_SOURCES[backend.split()[0]]:
        digest.update((root / source).read_bytes())
    return digest.hexdigest()


def ceiling_estimates(tokens: torch.Tensor, prompt_format: hmm.PromptFormat, spec: hmm.MixtureSpec,
                      settings: SMCSettings | CollapsedSMCSettings = CEILING_SETTINGS,
                      replicates: int = CEILING_REPLICATES, backend: str = "numpy", device="cpu",
                      dtype: torch.dtype = torch.float64) -> Ceiling:
    """``replicates`` independent SMC estimates of the prior predictive of ``spec``'s prior on
    ``tokens (B, N)`` (seeds ``settings.seed + r``), by the SMC of ``backend`` (:data:`BACKEND_SOURCES`);
    the torch SMC runs on ``device`` in ``dtype`` and its estimates come back as float64 on the CPU.
    The collapsed backend takes :class:`~hmm.collapsed_smc.CollapsedSMCSettings` and gives upper
    bounds (:attr:`Ceiling.upper_bound`); the others take :class:`~hmm.prior_predictive.SMCSettings`.

    With :data:`CACHE_VARIABLE` set to a directory, the replicates are read from it when the same
    computation (:func:`_cache_key`) was done before, and written to it otherwise: every result
    on one family's prompts then pays for its SMC once. Unset, nothing is read or written."""
    if backend not in BACKEND_SOURCES:
        raise ValueError(f"backend: {backend!r}; expected one of {tuple(BACKEND_SOURCES)}")
    expected = CollapsedSMCSettings if backend == "collapsed" else SMCSettings
    if not isinstance(settings, expected):
        raise ValueError(f"settings: {type(settings).__name__}; expected {expected.__name__} for the {backend} backend")
    if backend in ("numpy", "collapsed") and (str(device) != "cpu" or dtype != torch.float64):
        raise ValueError(f"device, dtype: {device!r}, {dtype}; expected 'cpu' and torch.float64 for the {backend} "
                         f"backend")
    if backend == "torch":
        device, dtype = prior_predictive_torch.check_device(device), prior_predictive_torch.check_dtype(dtype)
        backend = f"torch {device.type} {str(dtype).removeprefix('torch.')}"
    prior = DirichletHMMPrior.from_spec(spec)
    directory = os.environ.get(CACHE_VARIABLE)
    path = None
    if directory:
        path = Path(directory) / f"{_cache_key(tokens, prompt_format, prior, settings, replicates, backend)}.npz"
        if path.is_file():
            with np.load(path) as stored:
                return Ceiling(list(torch.from_numpy(stored["replicates"])), settings, float(stored["seconds"]), True,
                               backend)

    def estimate(replicate_settings: SMCSettings | CollapsedSMCSettings) -> torch.Tensor:
        if backend == "numpy":
            return prior_predictive(tokens, prompt_format, prior, replicate_settings).next_token
        if backend == "collapsed":
            return collapsed_prior_predictive(tokens, prompt_format, prior, replicate_settings).next_token
        return prior_predictive_torch.prior_predictive(tokens, prompt_format, prior, replicate_settings, device, dtype
                                                       ).next_token.to("cpu", torch.float64)

    started = time.perf_counter()
    estimates = [estimate(dataclasses.replace(settings, seed=settings.seed + r)) for r in range(replicates)]
    result = Ceiling(estimates, settings, time.perf_counter() - started, False, backend)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial.npz")
        np.savez(partial, replicates=torch.stack(estimates).numpy(), seconds=result.seconds)
        partial.replace(path)
    return result


def per_prompt_loss(probabilities: torch.Tensor, tokens: torch.Tensor, num_tokens: int,
                    rows: torch.Tensor) -> torch.Tensor:
    """``(B,)``: each prompt's mean ``-log q(o_{t+1})`` over the scored rows selected by ``rows (N,)``."""
    mask, targets = scored_rows(tokens, num_tokens)
    mask = mask & rows
    losses = -probabilities.gather(-1, targets[..., None]).squeeze(-1).log()
    return (losses * mask).sum(-1) / mask.sum(-1)


def scope_rows(prompt_format: hmm.PromptFormat) -> dict[str, torch.Tensor]:
    """``{"test_sequence", "all_positions"}``: ``(N,)`` rows whose target lies in the test sequence,
    and every row (scored rows are those whose target is an HMM token)."""
    target_segment = torch.cat([prompt_format.segment_index[1:], torch.tensor([-1])])
    return {"test_sequence": target_segment == prompt_format.num_demos,
            "all_positions": torch.ones(prompt_format.length, dtype=torch.bool)}


def paired(differences: torch.Tensor) -> dict:
    """Mean of per-prompt ``differences``, its standard error and 95% interval."""
    mean = differences.mean().item()
    stderr = differences.std().item() / math.sqrt(differences.numel())
    return {"mean": mean, "stderr": stderr, "interval_95": [mean - Z_95 * stderr, mean + Z_95 * stderr]}


def gap_closed(unigram: torch.Tensor, model: torch.Tensor, ceiling: torch.Tensor) -> dict:
    """The module docstring's ``closed`` from per-prompt losses, with its delta-method interval:
    for ``a = loss_1 - loss_model``, ``c = loss_1 - loss_ceiling`` and ``F = mean(a) / mean(c)``,
    ``Var(F) ~ (Var(a) - 2 F Cov(a, c) + F^2 Var(c)) / (B mean(c)^2)``."""
    a, c = unigram - model, unigram - ceiling
    fraction = (a.mean() / c.mean()).item()
    covariance = torch.cov(torch.stack([a, c]))
    variance = (covariance[0, 0] - 2 * fraction * covariance[0, 1] + fraction**2 * covariance[1, 1]) / (
        a.numel() * c.mean() ** 2)
    stderr = variance.clamp_min(0).sqrt().item()
    return {"fraction": fraction, "stderr": stderr, "interval_95": [fraction - Z_95 * stderr, fraction + Z_95 * stderr],
            "gap_nats": c.mean().item()}


def competence_verdict(beats: dict[str, dict[str, bool]]) -> str:
    """:data:`VERDICTS` entry of the module docstring's rule from ``beats[scope]["ngram n"]`` and
    ``beats[scope][VARIABLE_ORDER]`` (where present)."""
    level = 0
    for n in NGRAM_ORDERS:
        if all(scope[f"ngram {n}"] for scope in beats.values()):
            level = n
        else:
            break
    if level == len(NGRAM_ORDERS) and all(scope.get(VARIABLE_ORDER, False) for scope in beats.values()):
        level += 1
    return RANKED_VERDICTS[level]


def is_competent(beats: dict[str, dict[str, bool]]) -> bool:
    """The module docstring's competence: orders 1 and 2 beaten in both scopes, and the
    variable-order predictor too where ``beats`` holds it."""
    return (RANKED_VERDICTS.index(competence_verdict(beats)) >= RANKED_VERDICTS.index(COMPETENT)
            and all(scope[VARIABLE_ORDER] for scope in beats.values() if VARIABLE_ORDER in scope))


def ceiling_error(replicates: list[torch.Tensor], tokens: torch.Tensor, num_tokens: int,
                  rows: torch.Tensor) -> float:
    """Monte-Carlo standard error of the averaged ceiling's mean loss, from the replicates'
    per-prompt losses ``L_r(b)``: ``sqrt(sum_b Var_r(L_r(b)) / R) / B`` (independent runs; the
    average's error is the single run's over R)."""
    losses = torch.stack([per_prompt_loss(r, tokens, num_tokens, rows) for r in replicates])  # (R, B)
    return (losses.var(0).sum() / len(replicates)).sqrt().item() / losses.shape[1]


def competence_section(model: Predictor, unigram: Predictor, preset: ExperimentPreset, num_prompts: int,
                       fresh_tasks: int, settings: SMCSettings | CollapsedSMCSettings = CEILING_SETTINGS,
                       replicates: int = CEILING_REPLICATES, backend: str = "numpy") -> Competence:
    """The competence result (module docstring, :class:`Competence`): the ladder on fresh HMMs
    (:func:`empirical.yardsticks.evaluate.evaluate_predictors`, reference = the ceiling, baseline = the
    in-context unigram), the hand-built network on its rows, the paired differences, the verdict
    and the fraction of the gap closed; the ceiling by ``replicates`` runs of ``backend``'s SMC
    (:func:`ceiling_estimates`), an upper bound for the collapsed one."""
    if backend not in CEILING_METHODS:
        raise ValueError(f"backend: {backend!r}; expected one of {tuple(CEILING_METHODS)}")
    fresh, prompts = fresh_prompts(preset, num_prompts, fresh_tasks)
    tokens, p, fmt = prompts.tokens, fresh.num_tokens, preset.prompt_format
    in_context = fitted_in_context(preset, fresh_tasks)
    ngrams = {name: in_context[name] for name in in_context if name != VARIABLE_ORDER}
    estimates = ceiling_estimates(tokens, fmt, preset.mixture_spec, settings, replicates, backend)
    averaged = estimates.probabilities
    predictors = {name: cached(predictor) for name, predictor in {
        "unigram": unigram, **in_context, "model": model, "ceiling": lambda _: averaged,
        "oracle": oracle_predictor(fresh, prompts)}.items()}
    ladder = evaluate_predictors(predictors, prompts, p, reference="ceiling", baseline="ngram 1")
    L, T = HAND_BUILT_NETWORK["history_length"], HAND_BUILT_NETWORK["gd_steps"]
    hand_built = evaluate_predictors({**predictors, "hand-built": hand_built_predictor(fmt, p, L, T)}, prompts, p,
                                     reference="ceiling", baseline="ngram 1", rows=served_rows(fmt, L))
    probabilities = {name: predictor(tokens) for name, predictor in predictors.items()}
    scopes = scope_rows(fmt)
    comparisons, beats, closed, ceiling_stderr = {}, {}, {}, {}
    for scope, rows in scopes.items():
        losses = {name: per_prompt_loss(probs, tokens, p, rows) for name, probs in probabilities.items()}
        comparisons[scope] = {f"model - {name}": paired(losses["model"] - losses[name])
                              for name in (*in_context, "ceiling", "oracle")}
        comparisons[scope]["ceiling - oracle"] = paired(losses["ceiling"] - losses["oracle"])
        beats[scope] = {name: comparisons[scope][f"model - {name}"]["interval_95"][1] < 0 for name in in_context}
        closed[scope] = gap_closed(losses["ngram 1"], losses["model"], losses["ceiling"])
        ceiling_stderr[scope] = ceiling_error(estimates.replicates, tokens, p, rows)
    verdict = competence_verdict(beats)
    ceiling_record = estimates.record()
    return Competence(
        rule=RULE,
        variable_order_rule=VARIABLE_ORDER_RULE,
        fresh_tasks=fresh_tasks,
        num_prompts=num_prompts,
        ngram_concentrations={name: list(ngram.concentrations) for name, ngram in ngrams.items()},
        ngram_fit={"prompts": FIT_PROMPTS, "mixture_stream": FIT_MIXTURE_STREAM, "prompt_stream": FIT_PROMPT_STREAM,
                   "fresh_tasks": fresh_tasks},
        variable_order={"depth": VARIABLE_ORDER_DEPTH,
                        "concentrations": list(in_context[VARIABLE_ORDER].concentrations)},
        ceiling={"method": CEILING_METHODS[backend],
                 **{key: ceiling_record[key]
                    for key in (COLLAPSED_CEILING_KEYS if estimates.upper_bound else COMPETENCE_CEILING_KEYS)},
                 **({"upper_bound": True} if estimates.upper_bound else {}),
                 "prompts_per_minute": num_prompts * 60 / estimates.seconds, "monte_carlo_stderr": ceiling_stderr},
        hand_built_network=HAND_BUILT_NETWORK,
        ladder=ladder,
        hand_built=hand_built,
        comparisons=comparisons,
        beats=beats,
        gap_closed=closed,
        verdict=verdict,
        competent=is_competent(beats),
    )
