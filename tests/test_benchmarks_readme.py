"""The HMM-engine benchmark's README paragraph and docs table (ledger/bench_text.py): skipped
baselines and number formats. That the committed blocks equal what the committed JSON generates
is checked with every other generated text in tests/test_ledger.py."""
import json
from pathlib import Path

from ledger import bench_text

RESULTS = json.loads((Path(__file__).resolve().parents[1] / bench_text.RESULTS).read_text())


def test_a_skipped_baseline_is_reported_with_its_reason():
    results = json.loads(json.dumps(RESULTS))
    baselines = results["filtering"]["baselines"]
    baselines[:] = [b for b in baselines if b["library"] != "dynamax"] + [{"library": "dynamax", "skipped": "No module named 'jax'"}]
    assert "dynamax's `hmm_filter` not measured (No module named 'jax')" in bench_text.readme_paragraph(results).replace("\n", " ")
    assert "| dynamax | skipped: No module named 'jax' |" in bench_text.docs_table(results)


def test_number_formats():
    assert bench_text._sci(266649.8) == "2.67e5"
    assert [bench_text._times(r) for r in (26.24, 5.83, 0.6, 0.0493, 131.6)] == ["26x", "5.8x", "0.60x", "0.049x", "132x"]
    assert [bench_text._size(b) for b in (132096, 8 << 20)] == ["129 KiB", "8 MiB"]
