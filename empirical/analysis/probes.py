"""Layer-wise linear probes (the paper's Figure 3): multinomial logistic regression from the
residual stream at one position to a label of that position.

Protocol. Features are the residual stream after a layer at the probed positions; they are
standardised with the training set's mean and standard deviation (columns constant on the
training set are dropped). The probe ``softmax(x W + b)`` minimises the mean cross-entropy plus
``weight_decay * ||W||_F^2`` by full-batch L-BFGS. It is trained on the positions of one set of
prompts and tested on the positions of a disjoint set of prompts (same mixture: a task-id probe
needs the tasks it is tested on). Accuracy = fraction of test positions whose argmax is the label;
its 95% interval is a bootstrap over test *prompts* (positions of one prompt are not independent).

Ceiling. A probe's accuracy means little without the best accuracy any decoder could reach from
the same prefix: with many tasks, "task id" and "hidden state index" are only partly identifiable
(state s of one HMM has nothing to do with state s of another). :func:`decoding_ceilings` is the
accuracy of the Bayes-optimal decoders ``argmax P(target | x_<=t)``, computed exactly from the
mixture (:func:`hmm.bayes_predictive` with ``decode=True``), on the same test positions, with the
same interval; for ``o_{t-k}`` the prefix contains the answer, so the ceiling is 1.

Targets, at every non-delimiter position t with at least ``max_distance`` earlier tokens in its
segment (the same positions for every target): the task id of the prompt, the hidden state at t,
and ``o_{t-k}``, the token k steps back, for ``k = 1..max_distance``.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

import hmm

PROBE_WEIGHT_DECAY = 1e-3
"""L2 penalty ``lambda ||W||^2`` on the probe weights (standardised features)."""
PROBE_MAX_ITERATIONS = 50
"""L-BFGS iterations of one probe fit (full batch); on the CPU-small streams the test accuracy
changes by < 0.003 between 30 and 150 iterations."""
BOOTSTRAP_RESAMPLES = 1000
"""Resamples of test prompts for the accuracy interval."""
CONFIDENCE = 0.95


class ProbeResult(NamedTuple):
    """Test accuracy of one probe with its bootstrap interval and the majority-class rate."""

    accuracy: float
    ci_low: float
    ci_high: float
    majority: float
    """Accuracy of always answering the most frequent training label (on the test positions)."""


def probe_positions(prompt_format: hmm.PromptFormat, max_distance: int) -> torch.Tensor:
    """``(N,)`` bool: non-delimiter positions with at least ``max_distance`` earlier tokens in
    their segment (so ``o_{t-k}``, k <= max_distance, lies in the same segment)."""
    check_distance(max_distance, prompt_format)
    return prompt_format.position_in_segment >= max_distance


def check_distance(max_distance: int, prompt_format: hmm.PromptFormat) -> None:
    """``ValueError`` unless ``1 <= max_distance < min(demo_length, test_length)``."""
    shortest = min(prompt_format.demo_length, prompt_format.test_length)
    if isinstance(max_distance, bool) or not isinstance(max_distance, int) or not 1 <= max_distance < shortest:
        raise ValueError(
            f"max_distance: {max_distance!r}; expected an integer in 1..{shortest - 1} (shorter than every segment)"
        )


def probe_targets(prompts: hmm.Prompts, max_distance: int) -> dict[str, torch.Tensor]:
    """Labels at :func:`probe_positions`, each ``(B * positions,)`` int64 in prompt-major order:
    ``task``, ``state`` and ``token k back`` for ``k = 1..max_distance``."""
    positions = torch.nonzero(probe_positions(prompts.format, max_distance)).squeeze(1)
    batch = prompts.tokens.shape[0]
    targets = {
        "task": prompts.task_ids[:, None].expand(batch, len(positions)).reshape(-1),
        "state": prompts.states[:, positions].reshape(-1),
    }
    for k in range(1, max_distance + 1):
        targets[f"token {k} back"] = prompts.tokens[:, positions - k].reshape(-1)
    return targets


def decoding_ceilings(mixture: hmm.Mixture, prompts: hmm.Prompts, max_distance: int) -> dict[str, dict]:
    """``{target: {accuracy, ci_low, ci_high, expected}}`` of the Bayes-optimal decoder of each
    :func:`probe_targets` target on ``prompts`` (module docstring): ``accuracy`` is its hit rate
    on the sampled labels (interval: bootstrap over prompts, as for the probes), ``expected``
    the mean of ``max_y P(y | x_<=t)``, its expected hit rate (no sampling noise of the labels)."""
    positions = torch.nonzero(probe_positions(prompts.format, max_distance)).squeeze(1)
    decoded = hmm.bayes_predictive(mixture, prompts.tokens, decode=True)
    state_posterior = decoded.state_posterior[:, positions].cpu()
    batch = prompts.tokens.shape[0]
    groups = torch.arange(batch).repeat_interleave(len(positions))
    answers = {
        "task": (decoded.task_map[:, positions].cpu().reshape(-1), decoded.task_map_probability[:, positions].cpu()),
        "state": (state_posterior.argmax(-1).reshape(-1), state_posterior.amax(-1)),
    }
    targets = probe_targets(prompts, max_distance)
    ceilings = {}
    for target, labels in targets.items():
        if target in answers:
            decision, confidence = answers[target]
            correct = decision == labels
            low, high = bootstrap_interval(correct, groups)
            ceilings[target] = {"accuracy": float(correct.double().mean()), "ci_low": low, "ci_high": high,
                                "expected": float(confidence.double().mean())}
        else:
            ceilings[target] = {"accuracy": 1.0, "ci_low": 1.0, "ci_high": 1.0, "expected": 1.0}
    return ceilings


def standardise(train: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x - mean) / std`` with the training set's statistics, float32; columns with std 0 on the
    training set are dropped from both."""
    train, test = train.float(), test.float()
    mean, std = train.mean(0), train.std(0)
    varying = std > 1e-5 * (1.0 + mean.abs())
    return (train[:, varying] - mean[varying]) / std[varying], (test[:, varying] - mean[varying]) / std[varying]


def fit_logistic_probe(features: torch.Tensor, labels: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W (d, C), b (C,))`` minimising ``mean CE(softmax(x W + b), y) + lambda ||W||_F^2``
    (``lambda`` = :data:`PROBE_WEIGHT_DECAY`) by full-batch L-BFGS with strong-Wolfe line search."""
    weight = torch.zeros(features.shape[1], num_classes, dtype=features.dtype, device=features.device,
                         requires_grad=True)
    bias = torch.zeros(num_classes, dtype=features.dtype, device=features.device, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=PROBE_MAX_ITERATIONS, line_search_fn="strong_wolfe",
                                  tolerance_grad=1e-6, tolerance_change=1e-9, history_size=20)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(features @ weight + bias, labels)
        loss = loss + PROBE_WEIGHT_DECAY * weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return weight.detach(), bias.detach()


def bootstrap_interval(correct: torch.Tensor, groups: torch.Tensor, seed: int = 0) -> tuple[float, float]:
    """Percentile interval (:data:`CONFIDENCE`) of the accuracy ``mean(correct)`` when the groups
    (prompts) are resampled with replacement :data:`BOOTSTRAP_RESAMPLES` times."""
    group_ids, inverse = torch.unique(groups, return_inverse=True)
    hits = torch.zeros(len(group_ids), dtype=torch.float64).index_add_(0, inverse, correct.double())
    sizes = torch.zeros(len(group_ids), dtype=torch.float64).index_add_(0, inverse, torch.ones_like(correct, dtype=torch.float64))
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(len(group_ids), (BOOTSTRAP_RESAMPLES, len(group_ids)), generator=generator)
    accuracies = hits[draws].sum(1) / sizes[draws].sum(1)
    tail = (1.0 - CONFIDENCE) / 2
    low, high = torch.quantile(accuracies, torch.tensor([tail, 1.0 - tail], dtype=torch.float64))
    return float(low), float(high)


def probe_accuracy(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    test_groups: torch.Tensor,
    device: torch.device | str = "cpu",
) -> ProbeResult:
    """Fit a probe on the training positions and measure it on the test positions (module
    docstring); ``test_groups`` names the prompt of each test position, for the interval. The fit
    runs on ``device`` (a paper-scale task probe has 8192 classes: use the GPU)."""
    train_x, test_x = standardise(train_features.to(device), test_features.to(device))
    num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    weight, bias = fit_logistic_probe(train_x, train_labels.to(device), num_classes)
    correct = ((test_x @ weight + bias).argmax(1).cpu() == test_labels)
    low, high = bootstrap_interval(correct, test_groups)
    majority_label = torch.bincount(train_labels, minlength=num_classes).argmax()
    return ProbeResult(
        accuracy=float(correct.double().mean()),
        ci_low=low,
        ci_high=high,
        majority=float((test_labels == majority_label).double().mean()),
    )
