"""Named layout of the residual stream: every slot of a column has a name and a row range.

One column per token. Rows, in order (``p`` tokens, delimiter ``p``, ``L`` history length,
``m`` future length)::

    token       p+1   one-hot of the column's own token (delimiter = row p); history block 0
    position    2     (cos k theta, sin k theta), global index k = 1..N (column 0 has k = 1)
    one         1     the constant 1
    test        1     1 on the columns of the test sequence, else 0
    history.r   p+1   one-hot of the token r steps back, r = 1..L-1      (written by stage 1)
    future.r    p+1   one-hot of the token r steps ahead, r = 1..m       (written by stage 2)
    joint       p^m   joint one-hot of future.1..m, only when m >= 2     (written by the MLP)
    weights.k   pL    row k of the regression matrix W, k = 0..p^m-1      (updated by stage 3)
    output      p^m   W_T x of the column                                 (written by stage 4)

Nothing outside this module uses a row number: weights, tests and plots address slots by name.
The regression covariate of a column is ``x = [token[:p]; history.1[:p]; ...; history.L-1[:p]]``
(dimension pL) and its target is ``future.1[:p]`` (m = 1) or ``joint`` (m >= 2, dimension p^m).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """Slot names mapped to half-open row ranges ``[start, stop)`` of the residual stream."""

    num_tokens: int
    history_length: int
    future_length: int
    slots: tuple[tuple[str, int, int], ...]

    @property
    def width(self) -> int:
        """Number of rows of the residual stream (the network's width)."""
        return self.slots[-1][2]

    @property
    def target_dim(self) -> int:
        """Dimension p^m of a regression target (and of the prediction)."""
        return self.num_tokens**self.future_length

    @property
    def feature_dim(self) -> int:
        """Dimension pL of a regression covariate x."""
        return self.num_tokens * self.history_length

    def rows(self, name: str) -> range:
        """Row range of slot ``name``; ``ValueError`` naming the known slots if it does not exist."""
        for slot, start, stop in self.slots:
            if slot == name:
                return range(start, stop)
        known = ", ".join(slot for slot, _, _ in self.slots)
        raise ValueError(f"slot={name!r} does not exist; expected one of: {known}")

    def row(self, name: str, index: int = 0) -> int:
        """Row of entry ``index`` inside slot ``name``."""
        rows = self.rows(name)
        if not 0 <= index < len(rows):
            raise ValueError(f"index={index} outside slot {name!r} of size {len(rows)}")
        return rows[index]

    def history_slot(self, r: int) -> str:
        """Slot holding the token r steps back: ``token`` for r = 0, ``history.r`` otherwise."""
        return "token" if r == 0 else f"history.{r}"

    def feature_rows(self) -> list[int]:
        """Rows of the covariate x: the first p rows (no delimiter row) of history blocks 0..L-1."""
        p = self.num_tokens
        return [row for r in range(self.history_length) for row in self.rows(self.history_slot(r))[:p]]

    def target_rows(self) -> list[int]:
        """Rows of the regression target y: ``future.1[:p]`` for m = 1, ``joint`` for m >= 2."""
        if self.future_length == 1:
            return list(self.rows("future.1")[: self.num_tokens])
        return list(self.rows("joint"))

    def exclusion_rows(self) -> list[int]:
        """Rows whose sum D is 0 exactly on regression samples and >= 1 elsewhere.

        D = sum_{r<L} history.r[p] + sum_{r<=m} future.r[p] + test: the delimiter coordinates of
        every block the sample uses, plus the test flag (see :mod:`construction.weights`).
        """
        p = self.num_tokens
        delimiters = [self.row(self.history_slot(r), p) for r in range(self.history_length)]
        delimiters += [self.row(f"future.{r}", p) for r in range(1, self.future_length + 1)]
        return delimiters + [self.row("test")]


def build_layout(num_tokens: int, history_length: int, future_length: int = 1) -> Layout:
    """Layout for ``p = num_tokens``, ``L = history_length``, ``m = future_length`` (see module doc)."""
    p, L, m = num_tokens, history_length, future_length
    sizes = [("token", p + 1), ("position", 2), ("one", 1), ("test", 1)]
    sizes += [(f"history.{r}", p + 1) for r in range(1, L)]
    sizes += [(f"future.{r}", p + 1) for r in range(1, m + 1)]
    if m >= 2:
        sizes.append(("joint", p**m))
    sizes += [(f"weights.{k}", p * L) for k in range(p**m)]
    sizes.append(("output", p**m))
    slots, start = [], 0
    for name, size in sizes:
        slots.append((name, start, start + size))
        start += size
    return Layout(num_tokens=p, history_length=L, future_length=m, slots=tuple(slots))


def exclusion_count(stream, layout: Layout):
    """``D_j`` of every column of a ``(D, N)`` stream (0 on regression samples, >= 1 elsewhere, up
    to the leak): the sum of its :meth:`Layout.exclusion_rows`."""
    return stream[layout.exclusion_rows()].sum(0)
