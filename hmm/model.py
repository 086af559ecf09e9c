"""HMM parameters and their validation.

An :class:`HMM` holds ``initial (..., S)``, ``transition (..., S, S)`` and ``emission (..., S, p)``.
The leading dimensions ``...`` are the *model batch*: a mixture of K HMMs is an ``HMM`` whose
batch shape is ``(K,)``. Tokens are ``0..p-1``; prompts use ``p`` as the delimiter.

Conventions (used by every module of :mod:`hmm`):
    ``transition[..., s, s'] = P(s_{t+1} = s' | s_t = s)`` (rows sum to 1),
    ``emission[..., s, o] = P(o_t = o | s_t = s)`` (rows sum to 1),
    ``initial[..., s] = P(s_1 = s)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

ROW_SUM_TOLERANCE = 1e-6
"""Largest accepted ``|sum(row) - 1|`` of a probability vector. Loose enough for float32 inputs
(whose rounding error is ~1e-7 per entry), tight enough that an unnormalised row is caught."""


def as_tensor(value, name: str, dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
    """Convert ``value`` (tensor, array or nested list) to a tensor, naming ``name`` on failure."""
    try:
        tensor = torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"{name}: cannot be read as an array ({error}); expected numbers") from error
    if dtype is not None:
        tensor = tensor.to(dtype)
    return tensor


def check_stochastic(tensor: torch.Tensor, name: str, *, tolerance: float = ROW_SUM_TOLERANCE) -> None:
    """Raise ``ValueError`` unless every last-axis row of ``tensor`` is a probability vector.

    Checks, in order: floating dtype, at least one entry per row, no NaN/inf, no negative entry,
    and ``|sum(row) - 1| <= tolerance``. The message names ``name``, the offending index and value.
    """
    if not torch.is_floating_point(tensor):
        raise ValueError(f"{name}: dtype {tensor.dtype} is not floating point; expected probabilities")
    if tensor.ndim == 0 or tensor.shape[-1] == 0:
        raise ValueError(f"{name}: shape {tuple(tensor.shape)} has no entries per row; expected (..., n>=1)")
    finite = torch.isfinite(tensor)
    if not bool(finite.all()):
        index = tuple(int(i) for i in (~finite).nonzero()[0])
        raise ValueError(f"{name}: entry {index} is {tensor[index].item()}; expected finite probabilities")
    if bool((tensor < 0).any()):
        index = tuple(int(i) for i in (tensor < 0).nonzero()[0])
        raise ValueError(f"{name}: entry {index} is {tensor[index].item():.6g} < 0; expected probabilities >= 0")
    deviation = (tensor.sum(-1, dtype=torch.float64) - 1.0).abs()
    if bool((deviation > tolerance).any()):
        row = tuple(int(i) for i in (deviation > tolerance).nonzero()[0])
        total = tensor[row].sum(dtype=torch.float64).item()
        raise ValueError(
            f"{name}: row {row} sums to {total:.10g}; expected rows summing to 1 (tolerance {tolerance:g})"
        )


@dataclass(frozen=True)
class HMM:
    """A (batch of) discrete hidden Markov model(s), validated on construction.

    Args:
        initial: ``(..., S)`` distribution of the first hidden state.
        transition: ``(..., S, S)``, rows sum to 1.
        emission: ``(..., S, p)``, rows sum to 1.

    The three batch shapes must broadcast to one shape (e.g. a shared ``initial (S,)`` with
    ``transition (K, S, S)``); :attr:`batch_shape` is that broadcast shape. Inputs that are not
    tensors are converted to float64; tensors keep their dtype and device (float32 is accepted for
    speed, float64 is what verification uses).
    """

    initial: torch.Tensor
    transition: torch.Tensor
    emission: torch.Tensor

    def __post_init__(self) -> None:
        fields = {}
        for name in ("initial", "transition", "emission"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor):
                value = as_tensor(np.asarray(value, dtype=np.float64), name)
            fields[name] = value
        initial, transition, emission = fields["initial"], fields["transition"], fields["emission"]
        if initial.ndim < 1:
            raise ValueError(f"initial: shape {tuple(initial.shape)}; expected (..., S)")
        if transition.ndim < 2 or transition.shape[-1] != transition.shape[-2]:
            raise ValueError(f"transition: shape {tuple(transition.shape)}; expected (..., S, S)")
        if emission.ndim < 2:
            raise ValueError(f"emission: shape {tuple(emission.shape)}; expected (..., S, p)")
        num_states = transition.shape[-1]
        if initial.shape[-1] != num_states or emission.shape[-2] != num_states:
            raise ValueError(
                f"initial/transition/emission: state counts {initial.shape[-1]}, {num_states}, "
                f"{emission.shape[-2]} differ; expected the same S in initial (..., S), "
                f"transition (..., S, S) and emission (..., S, p)"
            )
        dtypes = {initial.dtype, transition.dtype, emission.dtype}
        if len(dtypes) != 1:
            raise ValueError(f"initial/transition/emission: dtypes {sorted(map(str, dtypes))} differ; expected one dtype")
        devices = {initial.device, transition.device, emission.device}
        if len(devices) != 1:
            raise ValueError(f"initial/transition/emission: devices {sorted(map(str, devices))} differ; expected one device")
        try:
            torch.broadcast_shapes(initial.shape[:-1], transition.shape[:-2], emission.shape[:-2])
        except RuntimeError as error:
            raise ValueError(
                f"initial/transition/emission: batch shapes {tuple(initial.shape[:-1])}, "
                f"{tuple(transition.shape[:-2])}, {tuple(emission.shape[:-2])} do not broadcast"
            ) from error
        for name, value in fields.items():
            check_stochastic(value, name)
            object.__setattr__(self, name, value)

    @property
    def num_states(self) -> int:
        """S, the number of hidden states."""
        return self.transition.shape[-1]

    @property
    def num_tokens(self) -> int:
        """p, the number of observation symbols (the delimiter of prompts is token ``p``)."""
        return self.emission.shape[-1]

    @property
    def batch_shape(self) -> torch.Size:
        """Broadcast batch shape of the three parameter tensors (``()`` for a single HMM)."""
        return torch.broadcast_shapes(self.initial.shape[:-1], self.transition.shape[:-2], self.emission.shape[:-2])

    @property
    def dtype(self) -> torch.dtype:
        return self.transition.dtype

    @property
    def device(self) -> torch.device:
        return self.transition.device

    def to(self, device=None, dtype: torch.dtype | None = None) -> HMM:
        """A copy on ``device`` and/or in ``dtype`` (re-validated)."""
        return HMM(*(t.to(device=device, dtype=dtype) for t in (self.initial, self.transition, self.emission)))

    @classmethod
    def _derived(cls, initial: torch.Tensor, transition: torch.Tensor, emission: torch.Tensor) -> HMM:
        """An HMM made of views or slices of an already validated one: same rows, so no
        re-validation (which costs several passes over the parameters, ~1 GB for the paper mixture)."""
        derived = object.__new__(cls)
        for name, value in (("initial", initial), ("transition", transition), ("emission", emission)):
            object.__setattr__(derived, name, value)
        return derived

    def expand(self) -> HMM:
        """The same HMM with all three tensors expanded to the full :attr:`batch_shape` (views)."""
        batch = self.batch_shape
        S, p = self.num_states, self.num_tokens
        return HMM._derived(self.initial.expand(*batch, S), self.transition.expand(*batch, S, S), self.emission.expand(*batch, S, p))

    @cached_property
    def inverse_cdf_tables(self) -> tuple[torch.Tensor, ...]:
        """Row-wise CDFs on the CPU for inverse-CDF sampling, computed once per HMM object:
        ``initial (B, S)``, ``transition (B*S, S)``, ``emission (B*S, p)`` with ``B`` the
        flattened batch. The last entry of every row is set to exactly 1 so that a draw
        ``u in [0, 1)`` always lands on a valid index despite rounding of the cumulative sum."""
        full = self.expand()
        S, p = self.num_states, self.num_tokens
        tables = []
        for tensor, width in ((full.initial, S), (full.transition, S), (full.emission, p)):
            cdf = tensor.detach().cpu().reshape(-1, width).cumsum(-1)
            cdf[:, -1] = 1.0
            tables.append(cdf)
        return tuple(tables)

    def __getitem__(self, index) -> HMM:
        """Index the model batch, e.g. ``mixture[3]`` or ``mixture[:16]``."""
        full = self.expand()
        return HMM._derived(full.initial[index], full.transition[index], full.emission[index])


def check_tokens(obs, num_tokens: int, name: str = "obs", *, allow_delimiter: bool = False) -> torch.Tensor:
    """Validate an integer token array of shape ``(..., T)`` with ``T >= 1``; return it as int64.

    Tokens must lie in ``0..num_tokens-1``, or ``0..num_tokens`` when ``allow_delimiter`` (token
    ``num_tokens`` is the prompt delimiter).
    """
    tokens = obs if isinstance(obs, torch.Tensor) else as_tensor(np.asarray(obs), name)
    if tokens.ndim < 1 or tokens.shape[-1] == 0:
        raise ValueError(f"{name}: shape {tuple(tokens.shape)}; expected (..., T) with T >= 1 tokens")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"{name}: dtype {tokens.dtype}; expected integer tokens")
    top = num_tokens if allow_delimiter else num_tokens - 1
    bad = (tokens < 0) | (tokens > top)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name}: token {tokens[index].item()} at {index} is out of range; expected 0..{top}")
    return tokens.long()
