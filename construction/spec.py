"""The construction's parameters as one frozen value (docs/construction.md, section 0.1).

Symbols of the docs and their names here: ``p = num_tokens`` (tokens ``0..p-1``, delimiter p),
``L = history_length``, ``m = future_length``, ``T = gd_steps`` (gradient-descent layers), ``eta``
the GD step size, ``beta`` the softmax scale and ``theta`` the position angle of the shift heads,
``R' = penalty`` the weight that switches non-samples off in the GD heads.

The bound a spec gives for an N-column prompt (docs/construction.md, section 4) is the per-layer
leak times the amplification of the later stages::

    error_bound(N) = eps(beta, theta, N) * A(layout, doubling, T, eta, penalty)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from construction import leak
from construction.layout import Layout, build_layout


def default_penalty(num_tokens: int, history_length: int) -> float:
    """``10 p L``: comfortably above ``|<w_k, x> - y_k| <= L max|W| + 1`` for the O(1) iterates seen."""
    return 10.0 * num_tokens * history_length


@dataclass(frozen=True)
class ConstructionSpec:
    """Everything that fixes the hand-wired network's weights; refuses a value out of range.

    ``penalty=None`` stands for :func:`default_penalty` and is replaced by it on construction.
    """

    num_tokens: int
    history_length: int
    gd_steps: int
    eta: float
    beta: float
    theta: float
    future_length: int = 1
    doubling: bool = False
    penalty: float | None = None

    def __post_init__(self) -> None:
        if self.penalty is None:
            object.__setattr__(self, "penalty", default_penalty(self.num_tokens, self.history_length))
        integers = (
            ("num_tokens p", self.num_tokens, 2),
            ("history_length L", self.history_length, 1),
            ("gd_steps T", self.gd_steps, 1),
            ("future_length m", self.future_length, 1),
        )
        for name, value, least in integers:
            if not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"{name}={value!r}: expected an integer >= {least}")
        # penalty is None only until the first statement above sets it; the field's type cannot say so.
        for name, value in (("eta", self.eta), ("beta", self.beta), ("penalty", self.penalty)):  # type: ignore[assignment]
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}={value!r}: expected a finite number > 0")
        if not 0 < self.theta < math.pi:
            raise ValueError(f"theta={self.theta!r}: expected 0 < theta < pi (and N*theta < pi for an N-column prompt)")

    @cached_property
    def layout(self) -> Layout:
        """The residual-stream layout of ``p``, ``L``, ``m``."""
        return build_layout(self.num_tokens, self.history_length, self.future_length)

    def amplification(self) -> float:
        """:func:`construction.leak.amplification` A of this spec (it reads neither beta nor theta)."""
        return leak.amplification(self.layout, self.doubling, self.gd_steps, self.eta, self.penalty)  # type: ignore[arg-type]

    def error_bound(self, num_columns: int) -> float:
        """Bound on the end-to-end construction error ``|prediction - W_T x_test|`` of an N-column
        prompt: ``eps(beta, theta, N) * A`` (module docstring)."""
        return leak.layer_leak(self.beta, self.theta, num_columns) * self.amplification()
