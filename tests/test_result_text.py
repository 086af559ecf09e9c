"""The commands write their result JSON compact (:func:`hmmtf.options.result_text`, issue 66, item 3),
and the committed results of those commands are in that form, so that a rerun writes the same bytes
for the same numbers."""
import json
import math
import subprocess
from pathlib import Path

import pytest

from hmmtf.options import result_text
from ledger.provenance import matches_producers
from ledger.results import RESULTS, registered

ROOT = Path(__file__).resolve().parents[1]
COMPACT_COMMANDS = frozenset({"analyze", "heads", "klmap", "beliefs", "ngram-verdict", "evaluate", "markov-sweep",
                              "markov-incontext", "curves", "family-calibration", "signal", "plateau", "ladder"})
"""The subcommands whose results go through result_text. The benchmarks, ``hmmtf main`` and ``hmmtf
calibrate`` write their own form; so do results that another result reads (its producers name them:
rewriting their bytes would make that result stale), which keep the form they were made in."""


def test_the_text_parses_back_to_the_value_without_spaces_and_ends_with_one_line_break():
    value = {"loss": [1.9062500000000002, -0.0, 1e-300], "name": "Bayes-optimal \u2013 oracle", "nested": {"a": None}}
    text = result_text(value)
    assert json.loads(text) == value
    assert text.endswith("}\n") and text.count("\n") == 1 and ", " not in text and '": ' not in text


def test_a_value_that_is_not_finite_is_refused():
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        result_text({"ceiling": math.inf})


def test_the_committed_results_of_those_commands_are_in_that_form():
    listing = subprocess.run(["git", "ls-files", "figures"], cwd=ROOT, capture_output=True, text=True)
    if listing.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout: no committed results to read")
    checked, other = 0, []
    for path in (name for name in listing.stdout.split() if name.endswith(".json")):
        result = registered(path, RESULTS)
        words = (result.command or "").split() if result else []
        if words[:1] != ["hmmtf"] or words[1] not in COMPACT_COMMANDS:
            continue
        if any(matches_producers(path, other_result.producers) for other_result in RESULTS):
            continue
        text = (ROOT / path).read_text()
        checked += 1
        if result_text(json.loads(text)) != text:
            other.append(path)
    assert checked > 50 and not other, f"{checked} checked; not in result_text's form: {other}"
