"""The benchmark numbers in README.md and docs/hmm.md are the ones the committed benchmark JSON
generates (benchmarks/readme_numbers.py), so they cannot drift from the measurement."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "readme_numbers.py"
spec = importlib.util.spec_from_file_location("readme_numbers", SCRIPT)
numbers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(numbers)


def test_committed_blocks_equal_what_the_committed_json_generates():
    for path, text in numbers.rewritten(json.loads(numbers.RESULTS.read_text())).items():
        assert path.read_text() == text, f"{path.name} is stale: run python benchmarks/readme_numbers.py"


def test_a_skipped_baseline_is_reported_with_its_reason():
    results = json.loads(numbers.RESULTS.read_text())
    baselines = results["filtering"]["baselines"]
    baselines[:] = [b for b in baselines if b["library"] != "dynamax"] + [{"library": "dynamax", "skipped": "No module named 'jax'"}]
    assert "dynamax's `hmm_filter` not measured (No module named 'jax')" in numbers.readme_paragraph(results).replace("\n", " ")
    assert "| dynamax | skipped: No module named 'jax' |" in numbers.docs_table(results)


@pytest.mark.parametrize("text", ["no markers", "<!-- bench:hmm:end --> <!-- bench:hmm:start -->",
                                  "<!-- bench:hmm:start --> <!-- bench:hmm:start --> <!-- bench:hmm:end -->"])
def test_a_block_without_one_start_then_one_end_marker_is_refused(text):
    with pytest.raises(ValueError, match="README.md: .*bench:hmm:start"):
        numbers.replace_block(text, "hmm", "body", "README.md")


def test_replacing_a_block_keeps_the_text_around_it():
    text = "before\n<!-- bench:hmm:start -->\nold\n<!-- bench:hmm:end -->\nafter\n"
    assert numbers.replace_block(text, "hmm", "new", "README.md") == (
        "before\n<!-- bench:hmm:start -->\nnew\n<!-- bench:hmm:end -->\nafter\n")


def test_number_formats():
    assert numbers._sci(266649.8) == "2.67e5"
    assert [numbers._times(r) for r in (26.24, 5.83, 0.6, 0.0493, 131.6)] == ["26x", "5.8x", "0.60x", "0.049x", "132x"]
    assert [numbers._size(b) for b in (132096, 8 << 20)] == ["129 KiB", "8 MiB"]
