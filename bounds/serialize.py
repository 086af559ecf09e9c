"""Typed results to JSON-ready values, in one place: the edge where a result is written (``hmmtf main``'s
report.json; ``hmmtf evaluate``'s evaluation.json, competence.json and hand_built.json, and the
evaluation.json of ``hmmtf reproduce``).

A dataclass becomes a dict of its fields in declaration order, a dict keeps its keys, a list or
tuple becomes a list, a float that is not finite becomes the string ``float`` reads back as it
(``+inf``: :data:`INFINITY`; ``-inf``; NaN: :data:`NOT_A_NUMBER`), any other value is kept. Four
rules are declared on a field's ``metadata``:

* :data:`INLINE`: the field's own dict is merged into its parent's at its place (an HMM's
  description followed by what was measured on it);
* :func:`json_key`: the field is written under another key (``gd_steps`` as the docs' ``T``);
* :data:`OMIT`: the field is not written (it lives only in the typed result);
* :data:`OMIT_IF_NONE`: the field is not written when it is None (a section that was not computed).
"""
from __future__ import annotations

import dataclasses
import math

INFINITY = "inf"
"""How ``+inf`` is written: a smallest constant C when no finite C makes the bound hold
(:func:`bounds.formulas.lemma1_constant`), and the fitted C, the table's numbers that come from one.
Strict JSON has no infinity; ``float`` reads this string back as ``inf``, as it reads the number
``Infinity`` that reports written before issue 53 hold (Python's json parses it to ``inf``)."""

NOT_A_NUMBER = "nan"
"""How NaN is written: a value the data leave undefined, as the analysis report's shuffle test on a
prompt whose logits have no spread (:func:`empirical.analysis.report.summarise_shuffle`). Strict
JSON has no NaN; ``float`` reads this string back as NaN. It is also how the canaries' digests
write a NaN (``ledger/canaries.py``, ``_canonical``), so a report written before and after this
rule hashes alike."""

INLINE = {"json": "inline"}
"""Field metadata: merge the field's dict into the parent's."""

OMIT = {"json": "omit"}
"""Field metadata: leave the field out of the JSON."""

OMIT_IF_NONE = {"json": "omit if none"}
"""Field metadata: leave the field out of the JSON when its value is None."""


def json_key(name: str) -> dict[str, str]:
    """Field metadata: write the field under ``name``."""
    return {"json_key": name}


def to_json(value):
    """``value`` with every dataclass, dict, list and tuple converted by the module's rules."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        converted = {}
        for field in dataclasses.fields(value):
            rule, field_value = field.metadata.get("json"), getattr(value, field.name)
            if rule == OMIT["json"] or (rule == OMIT_IF_NONE["json"] and field_value is None):
                continue
            item = to_json(field_value)
            if rule == INLINE["json"]:
                converted.update(item)
            else:
                converted[field.metadata.get("json_key", field.name)] = item
        return converted
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return NOT_A_NUMBER if math.isnan(value) else INFINITY if value > 0 else f"-{INFINITY}"
    return value
