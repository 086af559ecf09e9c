"""The ledger's competence judges (ledger/ladder.py) on results with and without the variable-order
predictor: a result made before it is read by the old rule, a newer one must show it beaten."""
import copy
import json
from pathlib import Path

import pytest

from ledger.claims import Verdict
from ledger.documents import Doc
from ledger.ladder import BEATS_EVERY_NGRAM, BEATS_EVERY_PREDICTOR, RegimeModel, beats_every_ngram, \
    competent_by_ngram_verdict, is_competent

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


LOWER = "figures/competence/ceiling-lower-paper-sparse.json"
STATES_128_RUN = "figures/paper-scale/cpu/sparse-4x4x64-2x"


def test_the_lower_bound_is_quoted_beside_the_verdict_from_the_networks_own_row_and_does_not_gate():
    """The competence number quotes the reverse-annealing bound's distance for the network the verdict
    scored (its checkpoint's run), not another network's; the verdict is the verdict's alone."""
    verdict = Doc.load(ROOT, f"{STATES_128_RUN}/ngram-verdict.json")
    lower = Doc.load(ROOT, LOWER)
    rows = lower["scopes", "test_sequence", "on_the_largest_setting's_prompts"]
    own = rows["models/paper-scale-cpu/sparse-4x4x64-2x"]["minus_lower"]
    data = copy.deepcopy(lower.data)
    data["scopes"]["test_sequence"]["on_the_largest_setting's_prompts"]["models/paper-scale-cpu/sparse-2x4x64-2x"][
        "minus_lower"] = {"mean": 9.0, "stderr": 1.0, "interval_95": [7.0, 11.0]}
    outcome = competent_by_ngram_verdict(verdict, None, Doc(LOWER, data))
    assert f"the model lies {own['mean']:.3f} [{own['interval_95'][0]:.3f}, {own['interval_95'][1]:.3f}] above it" \
        in outcome.number
    assert "9.000" not in outcome.number
    assert outcome.verdict == competent_by_ngram_verdict(verdict).verdict == Verdict.HOLDS


def test_a_lower_bound_without_the_upper_bound_is_refused():
    with pytest.raises(ValueError, match="ceiling_lower: .* expected the upper bound"):
        RegimeModel("x", "X", "on x, ", "p", "a", "a", {}, ngram_verdict="v.json", ceiling=False, ceiling_lower=LOWER)


def test_a_network_the_lower_bound_did_not_score_is_said_to_be_unscored():
    verdict = Doc.load(ROOT, f"{STATES_128_RUN}/ngram-verdict.json")
    data = copy.deepcopy(Doc.load(ROOT, LOWER).data)
    del data["scopes"]["test_sequence"]["on_the_largest_setting's_prompts"]["models/paper-scale-cpu/sparse-4x4x64-2x"]
    assert competent_by_ngram_verdict(verdict, None, Doc(LOWER, data)).number.endswith(
        "this network is not scored on those prompts")
