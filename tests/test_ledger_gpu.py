"""ledger/gpu.py: the judges of the lent GPU's claims decide by their stated rules, on the committed
results and on copies changed so that the rule must turn."""
import copy
import json
from pathlib import Path

from ledger.claims import Verdict
from ledger.documents import Doc
from ledger import gpu
from ledger.ladder import BEATS_EVERY_NGRAM

ROOT = Path(__file__).resolve().parents[1]


def load(path: str) -> Doc:
    return Doc(path, json.loads((ROOT / path).read_text()))


def changed(doc: Doc, edit) -> Doc:
    data = copy.deepcopy(doc.data)
    edit(data)
    return Doc(doc.path, data)


def test_competence_holds_only_when_some_run_beats_every_ngram():
    sweep = load(gpu.SWEEP)
    verdicts = [run["verdict"]["verdict"] for run in sweep["runs"].values()]
    expected = Verdict.HOLDS if BEATS_EVERY_NGRAM in verdicts else Verdict.NOT_REPRODUCED
    assert gpu.paper_size_competence(sweep).verdict is expected

    def one_beats_every(data):
        next(iter(data["runs"].values()))["verdict"]["verdict"] = BEATS_EVERY_NGRAM

    assert gpu.paper_size_competence(changed(sweep, one_beats_every)).verdict is Verdict.HOLDS


def test_the_best_run_is_the_lowest_test_sequence_loss():
    sweep = load(gpu.SWEEP)
    losses = {name: run["verdict"]["losses"]["test_sequence"]["model"] for name, run in sweep["runs"].items()}
    assert f"best ({min(losses, key=losses.get)})" in gpu.paper_size_competence(sweep).number


def test_agreement_fails_once_one_difference_reaches_the_bound():
    cpu, gpu64, gpu32 = (load(path) for path in (gpu.SMC_CPU, *gpu.SMC_GPU))
    assert gpu.gpu_agrees_with_cpu(cpu, gpu64, gpu32).verdict is Verdict.HOLDS
    base = gpu32["convergence", "base", "all_positions"]
    cpu_base = cpu["convergence", "base", "all_positions"]
    error = (base["monte_carlo_stderr"] ** 2 + cpu_base["monte_carlo_stderr"] ** 2) ** 0.5

    def shifted(data):
        data["convergence"]["base"]["all_positions"]["loss"] = cpu_base["loss"] + 1.01 * gpu.AGREEMENT_ERRORS * error

    assert gpu.gpu_agrees_with_cpu(cpu, gpu64, changed(gpu32, shifted)).verdict is Verdict.FAILS


def test_convergence_needs_both_scopes():
    smc = load(gpu.SMC_S128)
    flags = [smc["convergence", scope, "converged"] for scope in gpu.SCOPES]
    assert (gpu.converged_at_paper_scale(smc).verdict is Verdict.HOLDS) == all(flags)

    def converged(data):
        for scope in gpu.SCOPES:
            data["convergence"][scope]["converged"] = True

    assert gpu.converged_at_paper_scale(changed(smc, converged)).verdict is Verdict.HOLDS


def test_the_small_networks_hold_only_when_one_beats_every_ngram():
    verdicts = [load(path) for path in gpu.SMALL]
    expected = Verdict.HOLDS if any(doc["verdict"] == BEATS_EVERY_NGRAM for doc in verdicts) else Verdict.NOT_REPRODUCED
    assert gpu.small_networks_competence(*verdicts).verdict is expected

    def beats_every(data):
        data["verdict"] = BEATS_EVERY_NGRAM

    assert gpu.small_networks_competence(changed(verdicts[0], beats_every), *verdicts[1:]).verdict is Verdict.HOLDS


def test_the_collapsed_smc_converges_only_when_the_change_is_within_its_error_in_both_scopes():
    bench = load(gpu.COLLAPSED_S128)
    flags = [bench["doubling", scope, "converged"] for scope in gpu.SCOPES]
    assert (gpu.collapsed_converged(bench).verdict is Verdict.HOLDS) == all(flags)

    def converged(data, scopes):
        for scope in scopes:
            data["doubling"][scope]["converged"] = True

    assert gpu.collapsed_converged(changed(bench, lambda data: converged(data, gpu.SCOPES))).verdict is Verdict.HOLDS
    one_scope = changed(bench, lambda data: [converged(data, gpu.SCOPES[:1]),
                                             data["doubling"][gpu.SCOPES[1]].update(converged=False)])
    assert gpu.collapsed_converged(one_scope).verdict is Verdict.NOT_REPRODUCED


def test_the_ceiling_lies_below_the_trigram_only_when_the_bound_does_in_both_scopes():
    for path in gpu.CEILING_BOUNDS.values():
        bounds = load(path)
        ends = [bounds["scopes", scope, "bound_minus", "ngram 3", "upper_95"] for scope in gpu.SCOPES]
        assert (gpu.ceiling_below_trigram(bounds).verdict is Verdict.HOLDS) == all(end < 0 for end in ends)

        def set_ends(data, values):
            for scope, value in zip(gpu.SCOPES, values):
                data["scopes"][scope]["bound_minus"]["ngram 3"]["upper_95"] = value

        assert gpu.ceiling_below_trigram(changed(bounds, lambda data: set_ends(data, (-0.01, -0.01)))).verdict is Verdict.HOLDS
        assert gpu.ceiling_below_trigram(changed(bounds, lambda data: set_ends(data, (-0.01, 0.0)))
                                         ).verdict is Verdict.NOT_REPRODUCED


def test_depth_competence_needs_a_network_beating_every_in_context_predictor_on_each_family():
    verdicts = [load(path) for path in gpu.DEPTH_LADDER]
    families = {verdict["task", "mixture"] for verdict in verdicts}
    assert gpu.deeper_networks_competence(*verdicts).verdict is Verdict.HOLDS
    assert len(families) == 2

    def short_of_the_variable_order(data):
        data["verdict"] = BEATS_EVERY_NGRAM

    family = verdicts[0]["task", "mixture"]
    downgraded = [changed(verdict, short_of_the_variable_order) if verdict["task", "mixture"] == family else verdict
                  for verdict in verdicts]
    outcome = gpu.deeper_networks_competence(*downgraded)
    assert outcome.verdict is Verdict.NOT_REPRODUCED
    assert outcome.reason.startswith("1 of 2 families")
