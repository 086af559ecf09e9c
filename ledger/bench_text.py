"""The HMM-engine benchmark's numbers in README.md and docs/hmm.md, written from its JSON
(``figures/benchmarks/hmm.json``, made by ``python benchmarks/bench_hmm.py --json
figures/benchmarks/hmm.json``), so the prose cannot drift from the measurement.

Two generated blocks (:mod:`ledger.blocks`): ``bench:hmm`` in README.md (the "The HMM engine"
paragraph, :func:`readme_paragraph`) and ``bench:hmm-table`` in docs/hmm.md (the table of every
setting, :func:`docs_table`). ``hmmtf ledger`` rewrites them with every other generated text
(``make bench`` runs it after the benchmark); ``hmmtf ledger --check`` fails when they differ from
what the committed JSON generates.
"""
from __future__ import annotations

import math
import textwrap

RESULTS = "figures/benchmarks/hmm.json"
"""The benchmark's JSON, relative to the repository root."""
README_WIDTH = 100
"""Line width of the README's wrapped paragraphs."""


def _sci(value: float) -> str:
    """Three significant digits, exponent without sign padding: ``266649.8 -> "2.67e5"``."""
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _times(ratio: float) -> str:
    """A ratio to two significant digits, whole numbers from 10 on:
    ``26.24 -> "26x"``, ``5.83 -> "5.8x"``, ``0.6 -> "0.60x"``."""
    return f"{ratio:.{max(0, 1 - math.floor(math.log10(ratio)))}f}x"


def _size(num_bytes: int) -> str:
    """``132096 -> "129 KiB"``, ``8388608 -> "8 MiB"``."""
    return f"{num_bytes / 2**20:.0f} MiB" if num_bytes >= 2**20 else f"{num_bytes / 2**10:.0f} KiB"


def _gbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.0f} GB/s"


def _marked(baselines: list[dict], library: str, mark: str) -> dict | None:
    """The entry of ``library`` carrying ``mark`` (``best``: its fastest setting; ``default``: the
    setting a user gets without tuning), or None when the library was skipped."""
    return next((b for b in baselines if b["library"] == library and b.get(mark)), None)


def _skipped(baselines: list[dict], library: str) -> str:
    return next(b["skipped"] for b in baselines if b["library"] == library)


def _provenance(results: dict) -> str:
    """The command, the commit and, where the record names it, the machine (a timing is a
    measurement of one), its threads and load."""
    dirty = " with uncommitted changes" if results["git_dirty"] else ""
    machine = results["machine"]
    host = results.get("host")
    on = f" on {host['cpu']} ({host['kernels']} kernels)" if host else ""
    return (f"`{results['command']}` at commit {results['git_commit'][:7]}{dirty}{on}, {machine['threads']} threads, "
            f"load average {machine['load_average_1min_at_start']:.1f} at the start")


def _versus(baselines: list[dict], library: str, name: str) -> str:
    """``ratio the rate of name at its fastest setting (setting, rate; ratio its default)``."""
    best, default = _marked(baselines, library, "best"), _marked(baselines, library, "default")
    if best is None:
        return f"{name} not measured ({_skipped(baselines, library)})"
    text = f"{_times(best['speedup'])} the rate of {name} at its fastest setting ({best['setting']}, {_sci(best['tokens_per_s'])} tokens/s"
    if default is not best:
        text += f"; {_times(default['speedup'])} its default, {default['setting']}"
    return text + ")"


def readme_paragraph(results: dict) -> str:
    """The README's "The HMM engine" paragraph."""
    f, b = results["filtering"], results["bayes"]
    timed_baselines = [baseline for baseline in f["baselines"] if "tokens_per_s" in baseline]
    agreement = max(baseline["max_abs_loglik_difference"] for baseline in timed_baselines)
    machine_bound = max(f["bandwidth_bounds"], key=lambda bound: bound["tokens_per_s"])
    versus_hmmlearn = _versus(f["baselines"], "hmmlearn", "hmmlearn's `CategoricalHMM`")
    versus_dynamax = _versus(f["baselines"], "dynamax", "dynamax's `hmm_filter`")
    particle = f["particle_filter"]
    dynamax = _marked(f["baselines"], "dynamax", "best")
    particle_versus_dynamax = ("" if dynamax is None else
                               f", {_times(dynamax['particle_filter_speedup'])} dynamax's fastest setting")
    text = (
        f"**The HMM engine** ({_provenance(results)}; `figures/benchmarks/hmm.json`, table in `docs/hmm.md`): "
        f"filtering {f['num_hmms']} distinct HMMs (S = {f['num_states']}, p = {f['num_tokens']}, T = {f['length']}, one "
        f"sequence each) at {_sci(f['ours_tokens_per_s'])} tokens/s: "
        f"{versus_hmmlearn}, {versus_dynamax}; "
        f"log-likelihoods agree to {agreement:.0e}. The SMC's filter (`hmm.particle_filter`, made for this case) "
        f"runs at {_sci(particle['tokens_per_s'])} tokens/s{particle_versus_dynamax}. "
        f"Reading each HMM's transition matrix and emission column once per token bounds filtering at "
        f"{_sci(machine_bound['tokens_per_s'])} tokens/s here ({f['bytes_per_token']} bytes per token at the "
        f"{_gbps(machine_bound['read_bytes_per_s'])} measured re-reading {machine_bound['working_set']}'s "
        f"{_size(machine_bound['bytes'])}); ours reaches {machine_bound['ours_fraction']:.0%} of it. "
        f"The Bayes-optimal mixture ({b['num_tasks']} tasks x {b['num_prompts']} prompts) runs at "
        f"{b['gflops']:.1f} GFLOP/s = {b['fraction_of_peak']:.0%} of the float64 matmul rate measured in the same run "
        f"({results['matmul_peak_gflops_float64']:.1f} GFLOP/s)"
    )
    if "generation" in results:
        g = results["generation"]
        text += (f"; the paper's {g['num_prompts']:,} prompts are sampled in {g['sampling_seconds']:.1f} s (the "
                 f"{g['mixture_hmms']}-HMM mixture built in {g['mixture_build_seconds']:.1f} s)")
    return textwrap.fill(text + ".", README_WIDTH, break_long_words=False, break_on_hyphens=False)


def docs_table(results: dict) -> str:
    """docs/hmm.md's table: ours, every baseline setting and the bandwidth bounds, with ratios."""
    f = results["filtering"]
    rows = [
        "| filter | setting (bounds: read rate) | HMMs timed | tokens/s | ours / it | SMC's filter / it | max abs log-lik difference |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
        f"| ours, `hmm.log_likelihood` | torch, {results['machine']['threads']} threads | {f['num_hmms']} | "
        f"{_sci(f['ours_tokens_per_s'])} | | | (reference) |",
        f"| ours, the SMC's filter `hmm.particle_filter.log_likelihood` | numpy, {f['particle_filter']['threads']} threads | "
        f"{f['num_hmms']} | {_sci(f['particle_filter']['tokens_per_s'])} | | | "
        f"{f['particle_filter']['max_abs_loglik_difference']:.0e} |",
    ]
    for baseline in f["baselines"]:
        if "skipped" in baseline:
            rows.append(f"| {baseline['library']} | skipped: {baseline['skipped']} | | | | | |")
            continue
        marks = [mark for mark in ("default", "best") if baseline.get(mark)]
        setting = baseline["setting"] + (f" ({', '.join('fastest' if m == 'best' else m for m in marks)})" if marks else "")
        rows.append(f"| {baseline['library']} | {setting} | {baseline['num_hmms']} | {_sci(baseline['tokens_per_s'])} | "
                    f"{_times(baseline['speedup'])} | {_times(baseline['particle_filter_speedup'])} | "
                    f"{baseline['max_abs_loglik_difference']:.0e} |")
    for bound in f["bandwidth_bounds"]:
        rows.append(f"| bound: {f['bytes_per_token']} bytes per token at the read rate of {bound['working_set']} "
                    f"({_size(bound['bytes'])}) | {_gbps(bound['read_bytes_per_s'])} | | {_sci(bound['tokens_per_s'])} | "
                    f"{bound['ours_fraction']:.0%} | | |")
    return "\n".join([f"Measured by {_provenance(results)}:", "", *rows])
