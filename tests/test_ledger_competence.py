"""The ledger's competence judges (ledger/ladder.py) on results with and without the variable-order
predictor: a result made before it is read by the old rule, a newer one must show it beaten."""
import copy
import json
from pathlib import Path

import pytest

from ledger.claims import Verdict
from ledger.documents import Doc
from ledger.ladder import BEATS_EVERY_NGRAM, BEATS_EVERY_PREDICTOR, beats_every_ngram, competent_by_ngram_verdict, \
    is_competent

SCOPES = ("test_sequence", "all_positions")
NGRAMS = ("ngram 1", "ngram 2", "ngram 3")
ROOT = Path(__file__).resolve().parents[1]
COMMITTED = "figures/paper/2x4x64/ngram-verdict.json"


def verdict_document(verdict: str, beats_variable_order: tuple[bool, bool] | None) -> Doc:
    """A committed ngram-verdict.json (the model beats orders 1-3 in both scopes) with ``verdict`` and
    the variable-order predictor beaten as given (None: a result made before it)."""
    data = copy.deepcopy(json.loads((ROOT / COMMITTED).read_text()))
    data["verdict"] = verdict
    for scope, beaten in zip(SCOPES, beats_variable_order or ()):
        data["beats"][scope] = {**dict.fromkeys(NGRAMS, True), "variable order": beaten}
    if beats_variable_order is None:
        data["beats"] = {scope: dict.fromkeys(NGRAMS, True) for scope in SCOPES}
    return Doc(COMMITTED, data)


@pytest.mark.parametrize(("verdict", "beats_variable_order", "competent", "top"), [
    (BEATS_EVERY_NGRAM, None, True, True),
    (BEATS_EVERY_PREDICTOR, (True, True), True, True),
    (BEATS_EVERY_NGRAM, (True, False), False, False),
    ("beats the in-context bigram", (False, False), False, False),
])
def test_a_network_is_competent_only_if_it_beats_the_variable_order_predictor_where_it_is_scored(
        verdict, beats_variable_order, competent, top):
    document = verdict_document(verdict, beats_variable_order)
    assert is_competent(document) == competent
    assert (competent_by_ngram_verdict(document).verdict == Verdict.HOLDS) == competent
    assert (beats_every_ngram(document).verdict == Verdict.HOLDS) == top
