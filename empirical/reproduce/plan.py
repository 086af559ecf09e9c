"""The plan of a reproduction: each stage's FLOPs, device-memory bytes and host seconds, and the
time they should take on the chosen device, from rates measured on that device at the start of
the run (or assumed, for a device this machine does not have).

Rates (:func:`measure_rates`): the best ``n x n`` matrix product in the training dtype, in
float32 and in float64, and the read bandwidth of device memory (``empirical.measurement.roofline``). Host
work (generating the mixture, sampling prompts, the hand-built network) runs on this machine's
CPU whatever the device; :func:`measure_host` times a scaled-down piece of each here.

Expected time of a stage, with ``e`` = :data:`PLANNED_EFFICIENCY` (training:
:data:`TRAINING_EFFICIENCY`)::

    device = sum_dtype FLOPs_dtype / (e rate_dtype)  (matrix work)   vs   bytes / bandwidth
    stage  = max or sum of device and host time, as each cost function's ``basis`` says

The FLOP formulas count matrix products only (each cost function's docstring); tests compare
them with ``torch.utils.flop_counter.FlopCounterMode``. A stage whose work grows with a count of
the analysis settings (prompts, tasks, state-forcing items) is costed at that count, its cap
(``StageCost.caps``); the stage records the count it ran beside it.

The budget (:class:`Budget`): the stages an invocation runs (:func:`stages_to_run`: not done, up
to ``--stop-after``) must fit the session's device time (:func:`check_budget`); the plan also
says how they split into calls of one device command each (:func:`split_into_calls`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

import hmm
from empirical.analysis.networks import hand_built_network
from empirical.analysis.patching import CONTROLS
from empirical.analysis.probes import PROBE_MAX_ITERATIONS, probe_positions
from empirical.yardsticks.competence import FIT_PROMPTS
from empirical.yardsticks.evaluate import EVAL_BATCH
from empirical.training.model import RoFormer, forward_flops_per_token, training_flops_per_token
from empirical.reproduce.config import ReproduceConfig
from empirical.measurement.roofline import STREAMED_BYTES, matmul_peak, read_bandwidth, timed

PLANNED_EFFICIENCY = 0.4
"""Fraction of the matmul peak the matrix products of the stages after training are planned to
reach (an assumption; ``benchmarks/bench_training.py`` measured 0.47 on one CPU thread)."""
TRAINING_EFFICIENCY = 0.29
"""Fraction of the matmul peak training is planned to reach: the steady MFU of the ``paper``
preset's training measured on an H200 (bf16, against the 783 TFLOP/s measured in the same
invocation; ``/work/shared/design/GPU.md``, "Measured on an H200", commit 61e8eb7)."""
COMPILE_SECONDS = 41.0
"""Planned ``torch.compile`` time of the model's training step: the first log window of that H200
run (16 steps, about 1 s of them at the steady rate; the rest compilation and warm-up)."""
MATMUL_SIZES = {"cuda": 8192, "cpu": 1024}
"""``n`` of the timed ``n x n`` products: large enough to fill the device."""
BANDWIDTH_BYTES = {"cuda": STREAMED_BYTES, "cpu": 64 << 20}
"""Size of the array whose re-reading measures the memory bandwidth: beyond every cache."""
HOST_SAMPLE_TASKS = 64
"""Tasks of the scaled-down mixture whose generation is timed (then scaled to K tasks)."""
HOST_DECODE_PROMPTS = 4
"""Prompts of the timed Bayes-optimal decoding (on the scaled-down mixture)."""
OPTIMIZER_BYTES_PER_PARAMETER = 44
"""Device bytes per parameter and step outside the matrix products: AdamW reads parameter,
gradient and both moments and writes parameter and moments (7 x 4 bytes), backward writes the
gradient (4), clipping reads it and scales it (4 + 8)."""
CHECKPOINT_BYTES_PER_PARAMETER = 12
"""A checkpoint holds weights and both AdamW moments in float32."""
DISK_BYTES_PER_S = 1e9
"""Planned write rate of checkpoints (an assumption for a local SSD)."""
BAYES_ELEMENTS_PER_STATE = 10
"""Device memory elements moved per hidden state by one step of :func:`hmm.bayes_predictive` for
one task and prompt: gather the likelihood (write S), joint (read 2S, write S), normaliser (read
S), filtered (read S, write S), ``filtered @ [T | T O]`` (read S, write S + p): about 10 S + 2 p."""
ATTENTION_TOUCHES = 3
"""Times each recorded attention tensor (scores and pattern, ``L H N^2`` each) crosses device
memory in a recording pass: written, read by the next operation, read by the analysis."""
FIGURE_SECONDS_PER_HEAD = 0.06
"""Host time of one head's panel in the attention figure (256 panels of 263 x 263 took 14 s on
the 2-core CPU machine)."""
FIGURE_SECONDS = 10.0
"""Host time of the other figures of the evaluation and the analysis."""
PATCHING_FIGURE_SECONDS = 4.0
"""Host time of the two patching figures (2.6-4.0 s for ``paper-mini``'s on the loaded 2-core CPU
machine; they do not grow with the prompt counts)."""
IN_CONTEXT_FIT_SECONDS_PER_TOKEN = 2.6e-4
"""Host seconds per token of the fitting prompts of fitting the in-context predictors'
concentrations (:func:`empirical.yardsticks.competence.fitted_in_context`: the n-grams of orders
1-3 and the CTW of depth 6 on :data:`~empirical.yardsticks.competence.FIT_PROMPTS` prompts): 34.6 s
of CPU time (``time.process_time``, one thread) for the paper format's 512 x 263 tokens on the
2-core AMD EPYC (AVX2) machine, 2026-12-07. CPU time, not wall time: the machine was loaded."""
IN_CONTEXT_SECONDS_PER_TOKEN = 1.34e-4
"""Host seconds per token of scoring prompts with the in-context predictors (n-grams 1-3 0.8, 1.5
and 2.4 s, CTW 2.8 s) and the oracle (10.6 s): 18.1 s of CPU time for 512 paper prompts of 263
tokens, measured as :data:`IN_CONTEXT_FIT_SECONDS_PER_TOKEN`."""
BUNDLE_SECONDS = 5.0
"""Host time to archive the outputs (a few MB of PNG and JSON, gzip)."""
H100_ASSUMPTIONS = {"float32_tflops": 50.0, "float64_tflops": 50.0, "bandwidth_tbs": 3.0}
"""Defaults of ``--assume-float32-tflops``, ``--assume-float64-tflops`` and
``--assume-bandwidth-tbs`` (the device tool's H100): float32 (no TF32) and float64 tensor-core
products at 3/4 of the datasheet's 67 TFLOP/s (the ratio measured there for bf16: 790 of 989),
memory 3.0 TB/s (a device-to-device copy measured there, ``.library/device/KINDS.md``, 2026-11-13)."""


class Rates(NamedTuple):
    """Rates of the device (FLOP/s, bytes/s) and where they come from."""

    train: float
    """Matmul FLOP/s in the training dtype (the peak MFU is measured against)."""
    float32: float
    float64: float
    bandwidth: float
    """Bytes/s read from device memory."""
    source: str


class HostTimings(NamedTuple):
    """Host (CPU) seconds of the work that runs beside the device, measured here."""

    mixture_s: float
    """Generating and fingerprinting the whole mixture (a mixture of :data:`HOST_SAMPLE_TASKS`
    timed, scaled linearly to K tasks)."""
    batch_s: float
    """Sampling one training batch of prompts."""
    hand_built_s: float
    """Building the hand-built network for one prompt and its first forward pass (which also
    converts its weight matrices)."""
    hand_built_forward_s: float
    """One more forward pass of that network (weights converted, attention not recorded): each
    patched run of its history patching."""
    decode_s: float
    """The Bayes-optimal decoders (:func:`hmm.bayes_predictive` with ``decode=True``, float64 on
    the host: the analysis's probe ceilings) per task and prompt."""
    hand_built_width: int
    hand_built_layers: int


class StageCost(NamedTuple):
    """A stage's planned work and time."""

    stage: str
    flops: dict[str, float]
    """Matrix-product FLOPs by dtype."""
    device_bytes: float
    host_s: float
    expected_s: float
    basis: str
    """How ``expected_s`` follows from the work and the rates."""
    caps: dict[str, int] = {}
    """The counts of the analysis settings the work was costed at (the most the stage runs)."""
    resumed_s: float | None = None
    """Planned seconds of running the stage again after it was cut off at its end, where it resumes
    from a checkpoint (training); None where it runs again from its start."""

    @property
    def retry_s(self) -> float:
        """Planned seconds of running the stage again after it was cut off at its end:
        ``resumed_s``, or the whole stage."""
        return self.expected_s if self.resumed_s is None else self.resumed_s


def measure_rates(device: torch.device, train_dtype: torch.dtype) -> Rates:
    """The device's matmul peaks (training dtype, float32, float64) and read bandwidth, measured now."""
    size = MATMUL_SIZES[device.type]
    float32 = matmul_peak(device, torch.float32, size)
    train = float32 if train_dtype == torch.float32 else matmul_peak(device, train_dtype, size)
    return Rates(train, float32, matmul_peak(device, torch.float64, size),
                 read_bandwidth(device, BANDWIDTH_BYTES[device.type]), f"measured on {device.type}")


def assumed_rates(peak_tflops: float, float32_tflops: float, float64_tflops: float, bandwidth_tbs: float) -> Rates:
    """Rates of a device this machine does not have (``--assume-*`` options); ``ValueError``
    naming the first that is not a positive number."""
    values = {"--assume-peak-tflops": peak_tflops, "--assume-float32-tflops": float32_tflops,
              "--assume-float64-tflops": float64_tflops, "--assume-bandwidth-tbs": bandwidth_tbs}
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: {value!r}; expected a number > 0")
    return Rates(peak_tflops * 1e12, float32_tflops * 1e12, float64_tflops * 1e12, bandwidth_tbs * 1e12,
                 "assumed (--assume-* options)")


def mixture_fingerprint(mixture: hmm.Mixture) -> str:
    """SHA-256 of the mixture's parameters and weights (float64 bytes, C order)."""
    digest = hashlib.sha256()
    for tensor in (mixture.hmm.initial, mixture.hmm.transition, mixture.hmm.emission, mixture.weights):
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def measure_host(config: ReproduceConfig) -> HostTimings:
    """Time, on this machine's CPU, a scaled-down mixture (generated and fingerprinted), one
    training batch, the hand-built network of the preset's sizes (built, a first and a second
    forward pass) and the Bayes-optimal decoders."""
    preset, analysis = config.preset, config.analysis
    spec = preset.mixture_spec
    small_spec = dataclasses.replace(spec, num_tasks=min(spec.num_tasks, HOST_SAMPLE_TASKS))
    small, build_s = timed(lambda: small_spec.build(preset.mixture_seed))
    _, hash_s = timed(lambda: mixture_fingerprint(small))
    prompts, batch_s = timed(lambda: hmm.sample_prompts(small, preset.train.batch_size, preset.prompt_format, seed=0))
    network, network_s = timed(lambda: hand_built_network(prompts.tokens[0], spec.num_tokens, analysis.max_distance))
    prompt = prompts.tokens[0].numpy()
    trace, first_s = timed(lambda: network.forward(prompt))
    _, forward_s = timed(lambda: network.forward(prompt, record_attention=False))
    decoded = prompts.tokens[:HOST_DECODE_PROMPTS]
    _, decode_s = timed(lambda: hmm.bayes_predictive(small, decoded, decode=True))
    return HostTimings(
        mixture_s=(build_s + hash_s) * spec.num_tasks / small_spec.num_tasks, batch_s=batch_s,
        hand_built_s=network_s + first_s, hand_built_forward_s=forward_s,
        decode_s=decode_s / (small_spec.num_tasks * len(decoded)), hand_built_width=trace.residuals[0].shape[0],
        hand_built_layers=len(trace.layer_names))


def _seconds(flops: float, rate: float, efficiency: float = PLANNED_EFFICIENCY) -> float:
    """Planned seconds of matrix work: ``flops / (efficiency rate)``."""
    return flops / (efficiency * rate)


def num_parameters(config: ReproduceConfig) -> int:
    """Parameters of the preset's RoFormer (counted on the meta device: nothing is allocated)."""
    with torch.device("meta"):
        return RoFormer(config.preset.model_config(config.preset.mixture_spec.num_tokens)).num_parameters()


def mixture_cost(config: ReproduceConfig, rates: Rates, host: HostTimings) -> StageCost:
    """Host only: generate the K HMMs (seeded numpy) and fingerprint them."""
    spec = config.preset.mixture_spec
    return StageCost("mixture", {}, 0.0, host.mixture_s, host.mixture_s,
                     f"host: {spec.num_tasks} HMMs (timed on {min(spec.num_tasks, HOST_SAMPLE_TASKS)}, scaled)")


def train_cost(config: ReproduceConfig, rates: Rates, host: HostTimings) -> StageCost:
    """``training_flops_per_token x steps x batch x N`` in the training dtype; device bytes
    ``OPTIMIZER_BYTES_PER_PARAMETER x parameters x steps``; host: sampling every batch (overlapped
    with the device: the loop synchronises only at log steps); plus compilation and checkpoints.
    Resumed from its last checkpoint, it loses at most the steps of one checkpoint interval, and
    compiles and writes a checkpoint again."""
    preset, train = config.preset, config.preset.train
    length = preset.prompt_format.length
    model_config = preset.model_config(preset.mixture_spec.num_tokens)
    flops = float(training_flops_per_token(model_config, length)) * train.steps * train.batch_size * length
    parameters = num_parameters(config)
    device_bytes = float(OPTIMIZER_BYTES_PER_PARAMETER * parameters * train.steps)
    device_s = max(_seconds(flops, rates.train, TRAINING_EFFICIENCY), device_bytes / rates.bandwidth)
    host_s = host.batch_s * train.steps
    checkpoints = (train.steps // train.checkpoint_every if train.checkpoint_every else 0) + 1
    checkpoint_s = checkpoints * CHECKPOINT_BYTES_PER_PARAMETER * parameters / DISK_BYTES_PER_S
    compile_s = COMPILE_SECONDS if train.compile else 0.0
    dtype = str(config.train_dtype).removeprefix("torch.")
    lost = min(train.checkpoint_every / train.steps, 1.0) if train.checkpoint_every else 1.0
    return StageCost(
        "train", {dtype: flops}, device_bytes, host_s, max(device_s, host_s) + compile_s + checkpoint_s,
        f"max(device {device_s:.0f} s: {flops:.3g} FLOPs at {TRAINING_EFFICIENCY:.0%} of {rates.train / 1e12:.3g} "
        f"TFLOP/s {dtype}, host sampling {host_s:.0f} s) + compile {compile_s:.0f} s + {checkpoints} checkpoints "
        f"{checkpoint_s:.0f} s",
        resumed_s=lost * max(device_s, host_s) + compile_s + checkpoint_s / checkpoints)


def bayes_flops(num_tasks: int, num_states: int, num_tokens: int, num_prompts: int,
                prompt_format: hmm.PromptFormat, batch: int = EVAL_BATCH) -> int:
    """Matrix-product FLOPs of :func:`hmm.bayes_predictive` over ``num_prompts`` prompts in calls
    of ``batch`` (as :func:`empirical.yardsticks.evaluate.bayes_predictor` makes them). Per call of ``B``
    prompts and per task: ``T O`` (``2 S^2 p``) and ``initial O`` (``2 S p``) once; at each of the
    ``N - n`` non-delimiter positions ``filtered @ [T | T O]`` (``2 B S (S + p)``); at all ``N``
    positions the weighted sum of predictions (``2 B p``)."""
    S, p, N = num_states, num_tokens, prompt_format.length
    calls = math.ceil(num_prompts / batch)
    per_call_task = 2 * S * S * p + 2 * S * p
    per_prompt_task = (N - prompt_format.num_demos) * 2 * S * (S + p) + N * 2 * p
    return num_tasks * (calls * per_call_task + num_prompts * per_prompt_task)


def bayes_bytes(num_tasks: int, num_states: int, num_tokens: int, num_prompts: int,
                prompt_format: hmm.PromptFormat) -> float:
    """Device bytes of the float64 filters: ``K B (N - n) (10 S + 2 p) x 8``
    (:data:`BAYES_ELEMENTS_PER_STATE`)."""
    steps = num_tasks * num_prompts * (prompt_format.length - prompt_format.num_demos)
    return 8.0 * steps * (BAYES_ELEMENTS_PER_STATE * num_states + 2 * num_tokens)


def evaluate_work(config: ReproduceConfig) -> tuple[dict[str, float], float]:
    """FLOPs of the evaluation by dtype -- the model's forward pass over the held-out prompts
    (float32, :func:`forward_flops_per_token`) and the exact Bayes-optimal predictor over every
    task (float64, :func:`bayes_flops`) -- and the Bayes filters' device bytes (:func:`bayes_bytes`)."""
    preset = config.preset
    spec, fmt, prompts = preset.mixture_spec, preset.prompt_format, preset.eval_prompts
    model_config = preset.model_config(spec.num_tokens)
    model_flops = float(forward_flops_per_token(model_config, fmt.length)) * prompts * fmt.length
    filter_flops = float(bayes_flops(spec.num_tasks, spec.num_states, spec.num_tokens, prompts, fmt))
    return ({"float32": model_flops, "float64": filter_flops},
            bayes_bytes(spec.num_tasks, spec.num_states, spec.num_tokens, prompts, fmt))


def evaluate_cost(config: ReproduceConfig, rates: Rates, host: HostTimings) -> StageCost:
    """:func:`evaluate_work` on the device; host: sampling the held-out and the unigram prompts."""
    prompts = config.preset.eval_prompts
    flops, filter_bytes = evaluate_work(config)
    model_flops, filter_flops = flops["float32"], flops["float64"]
    model_s = _seconds(model_flops, rates.float32)
    filter_s = max(_seconds(filter_flops, rates.float64), filter_bytes / rates.bandwidth)
    host_s = 2 * prompts / config.preset.train.batch_size * host.batch_s
    return StageCost(
        "evaluate", flops, filter_bytes, host_s,
        model_s + filter_s + host_s,
        f"model {model_s:.1f} s + Bayes {filter_s:.1f} s (max of {filter_flops:.3g} float64 FLOPs at "
        f"{PLANNED_EFFICIENCY:.0%} of {rates.float64 / 1e12:.3g} TFLOP/s and {filter_bytes:.3g} bytes at "
        f"{rates.bandwidth / 1e12:.3g} TB/s) + host {host_s:.1f} s")


def ngram_verdict_work(config: ReproduceConfig) -> float:
    """Float32 FLOPs of the model's pass over the competence gate's prompts:
    ``forward_flops_per_token(N) N prompts``."""
    preset, settings = config.preset, config.verdict_settings
    model_config = preset.model_config(preset.mixture_spec.num_tokens)
    length = preset.prompt_format.length
    return float(forward_flops_per_token(model_config, length)) * length * settings.prompts


def ngram_verdict_cost(config: ReproduceConfig, rates: Rates, host: HostTimings) -> StageCost:
    """The competence gate (``hmmtf ngram-verdict``): the model's pass (:func:`ngram_verdict_work`) on
    the device; host: generating two mixtures of ``fresh_tasks`` HMMs (the prompts' and the fitting
    prompts', ``host.mixture_s`` scaled from the preset's K), sampling their prompts, fitting the
    in-context predictors (:data:`IN_CONTEXT_FIT_SECONDS_PER_TOKEN`) and scoring them and the oracle
    (:data:`IN_CONTEXT_SECONDS_PER_TOKEN`). Caps: the prompts and the fresh HMMs."""
    settings, spec = config.verdict_settings, config.preset.mixture_spec
    flops = ngram_verdict_work(config)
    device_s = _seconds(flops, rates.float32)
    mixtures_s = 2 * host.mixture_s * settings.fresh_tasks / spec.num_tasks
    sampling_s = (settings.prompts + FIT_PROMPTS) / config.preset.train.batch_size * host.batch_s
    length = config.preset.prompt_format.length
    predictors_s = (IN_CONTEXT_FIT_SECONDS_PER_TOKEN * FIT_PROMPTS + IN_CONTEXT_SECONDS_PER_TOKEN * settings.prompts) \
        * length
    host_s = mixtures_s + sampling_s + predictors_s + FIGURE_SECONDS
    return StageCost(
        "ngram-verdict", {"float32": flops}, 0.0, host_s, device_s + host_s,
        f"device {device_s:.1f} s ({flops:.3g} FLOPs float32) + host {host_s:.0f} s (2 x {settings.fresh_tasks} fresh "
        f"HMMs {mixtures_s:.0f} s, sampling {sampling_s:.0f} s, in-context predictors and oracle {predictors_s:.0f} s "
        f"on {settings.prompts} prompts, figure)",
        {"verdict_prompts": settings.prompts, "fresh_tasks": settings.fresh_tasks})


def probe_flops(rows: int, features: int, classes: int) -> float:
    """Upper bound on one probe fit: L-BFGS evaluates loss and gradient at most
    ``5/4 PROBE_MAX_ITERATIONS`` times (torch's default ``max_eval``), each ``x W`` forward and
    ``x^T dlogits`` backward: ``4 rows features classes`` FLOPs."""
    return PROBE_MAX_ITERATIONS * 5 // 4 * 4.0 * rows * features * classes


def hand_built_runs(train_prompts: int, test_prompts: int) -> int:
    """The hand-built network's runs in the analysis: ``train + 3 test + 1`` (probe training, probe
    test, shuffle originals and shuffled, the attention figure's prompt)."""
    return train_prompts + 3 * test_prompts + 1


def analysis_cost(config: ReproduceConfig, rates: Rates, host: HostTimings) -> StageCost:
    """Recorded forward passes (float32) of the trained and the random-init RoFormer over the
    probe-training, probe-test (streams and offsets) and shuffle prompts (original and shuffled),
    their attention tensors crossing memory :data:`ATTENTION_TOUCHES` times; probe fits
    (:func:`probe_flops`) on every stream of the three networks for the targets task, state and
    ``o_{t-k}``; host: the hand-built network on its prompts, the probe ceilings (Bayes-optimal
    decoders of the probe-test prompts over the probe tasks) and the figures. Caps: the probe
    tasks (all K for ``probe_tasks`` 0), the probe-training, probe-test and shuffle prompts, and the
    hand-built network's runs (:func:`hand_built_runs`)."""
    preset, analysis = config.preset, config.analysis
    spec, fmt = preset.mixture_spec, preset.prompt_format
    model_config = preset.model_config(spec.num_tokens)
    length, layers, heads = fmt.length, model_config.num_layers, model_config.num_heads
    passes = analysis.probe_train_prompts + 2 * analysis.probe_test_prompts + 2 * analysis.shuffle_prompts
    forward = 2.0 * forward_flops_per_token(model_config, length) * length * passes
    attention_bytes = 2.0 * passes * ATTENTION_TOUCHES * 2 * layers * heads * length**2 * 4
    positions = int(probe_positions(fmt, analysis.max_distance).sum())
    probe_tasks = analysis.probe_tasks or spec.num_tasks
    classes = [probe_tasks, spec.num_states] + [spec.num_tokens] * analysis.max_distance
    hand_train, hand_test = analysis.hand_built_counts
    probes = sum(
        2 * (layers + 1) * probe_flops(analysis.probe_train_prompts * positions, model_config.width, c)
        + (host.hand_built_layers + 1) * probe_flops(hand_train * positions, host.hand_built_width, c)
        for c in classes)
    device_s = _seconds(forward + probes, rates.float32) + attention_bytes / rates.bandwidth
    runs = hand_built_runs(hand_train, hand_test)
    decode_s = probe_tasks * analysis.probe_test_prompts * host.decode_s
    host_s = (runs * host.hand_built_s + decode_s + FIGURE_SECONDS_PER_HEAD * layers * heads
              + FIGURE_SECONDS)
    return StageCost(
        "analyze", {"float32": forward + probes}, attention_bytes, host_s, device_s + host_s,
        f"device {device_s:.1f} s ({forward:.3g} forward + {probes:.3g} probe FLOPs float32, {attention_bytes:.3g} "
        f"attention bytes) + host {host_s:.0f} s ({runs} hand-built prompts x {host.hand_built_s:.1f} s, "
        f"probe ceilings {decode_s:.1f} s, figures); {probe_tasks} probe tasks, {analysis.probe_train_prompts} + "
        f"{analysis.probe_test_prompts} probe and {analysis.shuffle_prompts} shuffle prompts",
        {"probe_tasks": probe_tasks, "probe_train_prompts": analysis.probe_train_prompts,
         "probe_test_prompts": analysis.probe_test_prompts, "shuffle_prompts": analysis.shuffle_prompts,
         "hand_built_runs": runs})


def patching_work(config: ReproduceConfig, items_by_test_position: Sequence[float]) -> tuple[float, float]:
    """Float32 FLOPs of the trained RoFormer's passes in the patching stage
    (:func:`empirical.analysis.report.patching_report`) and the device bytes of the attention its
    recorded passes store, given ``n_t`` = ``items_by_test_position[i]`` state-forcing items at the
    i-th test position t (the section's ``items_by_test_position``, or the plan's bound).
    With ``F(n) = forward_flops_per_token(n) n`` the FLOPs of a prompt cut after n tokens, L
    layers, P patched and C centroid prompts, R = ``max_distance``, N the prompt length::

        history patching  P (1 + R (1 + L)) F(N)      the clean pass; per r the modified prompt's
                                                       recorded pass and L patched passes
        centroid streams  C F(N)                       recorded passes, run only when some item exists
        state forcing     sum_t n_t (1 + 5 L) F(t + 1) per item its unpatched pass and one per layer
                                                       and condition (centroid, 4 controls), cut after t

    Attention bytes: ``C [some item] + P R`` recorded passes, each storing scores and pattern
    (``2 L H N^2`` float32) that cross memory :data:`ATTENTION_TOUCHES` times. ``ValueError``
    unless ``items_by_test_position`` holds one finite number >= 0 per test position."""
    preset, analysis = config.preset, config.analysis
    fmt = preset.prompt_format
    model_config = preset.model_config(preset.mixture_spec.num_tokens)
    items = list(items_by_test_position)
    numbers = all(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                  and value >= 0 for value in items)
    if len(items) != fmt.test_length or not numbers:
        raise ValueError(f"items_by_test_position: {items!r}; expected {fmt.test_length} finite numbers >= 0, one "
                         f"per test position of the format {fmt}")
    layers, heads, length = model_config.num_layers, model_config.num_heads, fmt.length

    def prompt_flops(tokens: int) -> float:
        return float(forward_flops_per_token(model_config, tokens) * tokens)

    centroid_passes = analysis.centroid_prompts if sum(items) > 0 else 0
    history = analysis.patching_prompts * (1 + analysis.max_distance * (1 + layers)) * prompt_flops(length)
    positions = torch.nonzero(fmt.test_positions).squeeze(1).tolist()
    forcing = sum(count * (1 + (1 + len(CONTROLS)) * layers) * prompt_flops(position + 1)
                  for count, position in zip(items, positions))
    recorded = centroid_passes + analysis.patching_prompts * analysis.max_distance
    attention_bytes = float(recorded * ATTENTION_TOUCHES * 2 * layers * heads * length**2 * 4)
    return history + centroid_passes * prompt_flops(length) + forcing, attention_bytes


def patching_cost(config: ReproduceConfig, rates: Rates, host: HostTimings) -> StageCost:
    """:func:`patching_work` at the caps: ``max_forcing_items`` state-forcing items, all at the last
    test position (an upper bound: however many confident positions the family has, state forcing
    patches at most that many, and a position cuts its prompt after itself); host: the hand-built
    network's history patching, per prompt ``hand_built_s + R (layers + 3) hand_built_forward_s``
    (built and run clean; per r the modified prompt, the column swap after the embedding and after
    each layer, and the slot patch), sampling the prompt sets, the figures. Caps: the forcing
    items, the prompts of the trained network's history patching and of the hand-built network's,
    the centroid prompts."""
    preset, analysis = config.preset, config.analysis
    items = [0] * (preset.prompt_format.test_length - 1) + [analysis.max_forcing_items]
    flops, attention_bytes = patching_work(config, items)
    device_s = _seconds(flops, rates.float32) + attention_bytes / rates.bandwidth
    passes = analysis.max_distance * (host.hand_built_layers + 3)
    per_prompt = host.hand_built_s + passes * host.hand_built_forward_s
    hand_built_prompts = analysis.hand_built_counts[1]
    sampling_s = (analysis.centroid_prompts + analysis.patching_prompts) / preset.train.batch_size * host.batch_s
    host_s = hand_built_prompts * per_prompt + sampling_s + PATCHING_FIGURE_SECONDS
    return StageCost(
        "patching", {"float32": flops}, attention_bytes, host_s, device_s + host_s,
        f"device {device_s:.1f} s ({flops:.3g} FLOPs float32: history patching of {analysis.patching_prompts} "
        f"prompts, state forcing of at most {analysis.max_forcing_items} items; {attention_bytes:.3g} attention "
        f"bytes) + host {host_s:.0f} s ({hand_built_prompts} hand-built prompts x {per_prompt:.1f} s: build and "
        f"first pass {host.hand_built_s:.1f} s + {passes} passes x {host.hand_built_forward_s:.2f} s; figures)",
        {"forcing_items": analysis.max_forcing_items, "history_prompts": analysis.patching_prompts,
         "hand_built_prompts": hand_built_prompts, "centroid_prompts": analysis.centroid_prompts})


def bundle_cost(config: ReproduceConfig, rates: Rates, host: HostTimings) -> StageCost:
    """Host only: one gzip archive of every JSON and figure."""
    return StageCost("bundle", {}, 0.0, BUNDLE_SECONDS, BUNDLE_SECONDS, "host: archive (constant)")


@dataclasses.dataclass(frozen=True)
class Budget:
    """Device time for the stages an invocation runs: ``session_minutes`` in all (``--budget-minutes``:
    a lent GPU's session less the machine's start) and ``call_minutes`` per device command
    (``--call-minutes``). ``ValueError`` naming the option unless each is a finite number > 0."""

    session_minutes: float
    call_minutes: float

    def __post_init__(self) -> None:
        for option, value in (("--budget-minutes", self.session_minutes), ("--call-minutes", self.call_minutes)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{option}: {value!r}; expected a finite number > 0")


def stages_to_run(costs: list[StageCost], done: set[str], stop_after: str | None) -> list[StageCost]:
    """The costs of the stages an invocation runs: those not ``done``, in order, up to and including
    ``stop_after`` (every stage for None). ``ValueError`` naming ``stop_after`` if no stage has that name."""
    names = [cost.stage for cost in costs]
    if stop_after is not None and stop_after not in names:
        raise ValueError(f"--stop-after: {stop_after!r}; expected one of {names}")
    last = names.index(stop_after) if stop_after is not None else len(costs) - 1
    return [cost for cost in costs[: last + 1] if cost.stage not in done]


def split_into_calls(costs: list[StageCost], call_minutes: float) -> list[list[StageCost]]:
    """``costs`` in order, cut at stage boundaries (where a run stops, ``--stop-after``, and the next
    call resumes) into the fewest calls of at most ``call_minutes`` each: a call takes stages while
    their planned seconds fit. A stage planned longer than a call is a call of its own, which only a
    detached run holds (it runs on between calls)."""
    calls: list[list[StageCost]] = []
    used = math.inf
    for cost in costs:
        if used + cost.expected_s > 60 * call_minutes:
            calls.append([])
            used = 0.0
        calls[-1].append(cost)
        used += cost.expected_s
    return calls


def _seconds_of(costs: list[StageCost]) -> float:
    """The planned seconds of ``costs`` together."""
    return sum(cost.expected_s for cost in costs)


def budget_lines(to_run: list[StageCost], budget: Budget) -> list[str]:
    """What the plan says of the stages to run: whether they fit the session budget (and whether
    what is left holds one retry of the stage costliest to run again, ``StageCost.retry_s``), how
    they split into calls (:func:`split_into_calls`), and how many calls follow them when
    detached."""
    if not to_run:
        return ["to run: nothing (every stage up to --stop-after is done)"]
    total, session_s, call_s = _seconds_of(to_run), 60 * budget.session_minutes, 60 * budget.call_minutes
    names = ", ".join(cost.stage for cost in to_run)
    head = f"to run: {names}: {total:.0f} s = {total / 60:.1f} min of the session budget of {budget.session_minutes:g} min"
    if total > session_s:
        session = f"{head}: over it by {total - session_s:.0f} s, refused"
    else:
        costliest = max(to_run, key=lambda cost: cost.retry_s)
        retry = "fits" if session_s - total >= costliest.retry_s else "does not fit"
        session = (f"{head}: fits, {session_s - total:.0f} s to spare; one retry of the stage costliest to run "
                   f"again ({costliest.stage}, {costliest.retry_s:.0f} s) {retry} in it")
    calls = split_into_calls(to_run, budget.call_minutes)
    parts = []
    for number, call in enumerate(calls, 1):
        seconds = _seconds_of(call)
        text = f"call {number}: {', '.join(cost.stage for cost in call)} ({seconds:.0f} s"
        if seconds > call_s:
            text += ", longer than a call: only a detached run (--detach) holds it, running on between calls)"
        elif number < len(calls):
            text += f"; --stop-after {call[-1].stage})"
        else:
            text += ")"
        parts.append(text)
    return [session,
            f"in calls of at most {budget.call_minutes:g} min, cut at stage boundaries: {'; '.join(parts)}",
            f"or detached (--detach, then --wait in each call; the run goes on between calls): "
            f"{_count(math.ceil(total / call_s), 'call')} of --wait to follow it to its end"]


def _count(number: int, noun: str) -> str:
    """``1 call``, ``3 calls``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def format_plan(costs: list[StageCost], rates: Rates, done: set[str], stop_after: str | None, budget: Budget,
                title: str) -> str:
    """The plan as a text table: one row per stage (marked ``done``, or ``not run`` after
    ``stop_after``), then :func:`budget_lines` of the stages to run, and the rates it used."""
    to_run = {cost.stage for cost in stages_to_run(costs, done, stop_after)}
    lines = [
        title,
        f"rates ({rates.source}): training matmul {rates.train / 1e12:.4g} TFLOP/s, float32 "
        f"{rates.float32 / 1e12:.4g}, float64 {rates.float64 / 1e12:.4g}, memory {rates.bandwidth / 1e12:.4g} TB/s; "
        f"matrix work planned at {PLANNED_EFFICIENCY:.0%} of peak, training at {TRAINING_EFFICIENCY:.0%}",
        f"{'stage':<20} {'FLOPs':>34} {'device bytes':>12} {'host s':>8} {'expected s':>10}  basis",
    ]
    for cost in costs:
        flops = " + ".join(f"{value:.3g} {dtype}" for dtype, value in cost.flops.items()) or "-"
        mark = " (done)" if cost.stage in done else "" if cost.stage in to_run else " (not run)"
        lines.append(f"{cost.stage + mark:<20} {flops:>34} {cost.device_bytes:>12.3g} {cost.host_s:>8.1f} "
                     f"{cost.expected_s:>10.1f}  {cost.basis}")
    lines.extend(budget_lines([cost for cost in costs if cost.stage in to_run], budget))
    return "\n".join(lines)


def check_budget(to_run: list[StageCost], budget: Budget) -> None:
    """``ValueError`` naming every stage's planned seconds when the stages to run
    (:func:`stages_to_run`) are planned longer than the session budget."""
    total = _seconds_of(to_run)
    if total > 60 * budget.session_minutes:
        stages = ", ".join(f"{cost.stage} {cost.expected_s:.0f} s" for cost in to_run)
        raise ValueError(
            f"--budget-minutes: {budget.session_minutes:g}; the stages to run are planned at {total / 60:.1f} min "
            f"({stages}); expected a budget of at least {math.ceil(total / 60)} min, fewer stages (--stop-after) "
            f"or a faster device (see --plan)")
