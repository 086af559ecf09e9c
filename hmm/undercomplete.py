"""Under-complete HMMs with a known m-step observability: the shift-register family (Theorem 2).

More hidden states than tokens (``S > p``) makes the one-step coefficient ``gamma_1 = gamma(O)``
zero: ``O^T`` maps the S-dimensional sum-zero space into ``R^p``, so it has a kernel. Assumption 4
of arXiv 2506.01919 asks instead for the m-step coefficient ``gamma_m = gamma(O_m)``, with
``O_m[s, (o_1..o_m)] = P(o_t..o_{t+m-1} | s_t = s)`` (:func:`hmm.observability.multistep_emission`).
This module builds HMMs where ``gamma_m`` is known in closed form, to test and to calibrate it.

**Shift register.** With register length r, the states are the r-tuples ``u = (u_1..u_r)`` of
tokens, ``S = p^r``, indexed ``sum_i u_i p^(r-i)`` (``u_1`` most significant, the order of
``O_m``'s columns). State u emits ``u_1`` through a symmetric noisy channel and shifts::

    O(u, o) = g [o = u_1] + (1 - g) / p,           P(u -> (u_2..u_r, v)) = D(u, v),

with ``D`` Dirichlet(c) rows over the new digit v. The next r tokens are emitted by the states
``u, (u_2..), ..., (u_r..)``, whose first digits are ``u_1..u_r`` whatever the v's, each through
the channel ``A = g I + (1 - g) U`` (``U = 11^T / p``) independently, so

    O_r = A (x) A (x) ... (x) A   (r Kronecker factors).

**Closed forms** (``p = 2``; :func:`shift_register_gamma`).

* ``gamma_m = 0`` for ``m < r``: ``O_m[u]`` depends on ``u_1..u_m`` only, so two states that differ
  in ``u_r`` alone have equal rows and ``x = e_u - e_u'`` gives ``O_m^T x = 0``.
* ``gamma_r = g^r``. Upper: ``y = (1, -1)`` has ``A y = g y``, so ``x = y (x) ... (x) y`` (r factors; its
  entries sum to ``(sum y)^r = 0``) has ``O_r^T x = g^r x``. Lower: for
  ``p = 2``, ``A^{-1} = (1/g) [[a, -(1-a)], [-(1-a), a]]`` with ``a = (1+g)/2`` has every column of
  l1 norm ``1/g``; column l1 norms multiply under Kronecker products, so
  ``||(O_r^T)^{-1}||_{1->1} = g^-r`` and ``||x||_1 <= g^-r ||O_r^T x||_1`` for every x.
* ``gamma_m >= gamma_r`` for ``m > r``: ``O_m`` summed over its last token is ``O_{m-1}``, and
  summing entries of a vector never increases its l1 norm, so ``gamma_m`` is nondecreasing in m.
"""
from __future__ import annotations

import torch

from hmm.generators import as_generator, dirichlet_rows
from hmm.markov import stationary_distribution
from hmm.model import HMM


def shift_register_hmm(num_tokens: int, register_length: int, observability: float,
                       transition_concentration: float = 1.0, seed=None) -> HMM:
    """The shift-register HMM of the module docstring: ``p = num_tokens``, ``r = register_length``
    (``S = p^r`` states), channel knob ``g = observability``, Dirichlet(``transition_concentration``)
    rows for the new digit; started in its stationary law."""
    if not isinstance(num_tokens, int) or num_tokens < 2:
        raise ValueError(f"num_tokens: {num_tokens!r}; expected an integer >= 2")
    if not isinstance(register_length, int) or register_length < 1:
        raise ValueError(f"register_length: {register_length!r}; expected an integer >= 1")
    if not 0 < observability <= 1:
        raise ValueError(f"observability: {observability!r}; expected a number in (0, 1]")
    p, S = num_tokens, num_tokens**register_length
    states = torch.arange(S)
    first_digit = states // p ** (register_length - 1)
    emission = torch.full((S, p), (1.0 - observability) / p, dtype=torch.float64)
    emission[states, first_digit] += observability
    new_digit = dirichlet_rows((S, p), transition_concentration, as_generator(seed))
    transition = torch.zeros((S, S), dtype=torch.float64)
    shifted = (states % p ** (register_length - 1)) * p  # (u_2..u_r, 0)
    transition[states[:, None], shifted[:, None] + torch.arange(p)] = new_digit
    return HMM(stationary_distribution(transition), transition, emission)


def shift_register_gamma(register_length: int, observability: float, m: int) -> float:
    """Closed-form ``gamma_m`` of a binary (``p = 2``) shift register, for ``m <= r``: 0 below the
    register length, ``g^r`` at it (module docstring). Larger m has no closed form (only ``>= g^r``)."""
    if not 1 <= m <= register_length:
        raise ValueError(f"m: {m!r}; expected 1 <= m <= register_length = {register_length} (closed form)")
    return observability**register_length if m == register_length else 0.0
