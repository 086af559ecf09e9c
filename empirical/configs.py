"""Plain-dataclass configurations written to and read from JSON (checkpoints, run logs)."""
from __future__ import annotations

import dataclasses


class JSONConfig:
    """Mixin for a dataclass: ``to_dict`` and its inverse ``from_dict``, which refuses unknown
    keys (a checkpoint written by another version fails loudly instead of losing settings)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict):
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown keys {unknown}; expected a subset of {sorted(known)}")
        return cls(**values)
