"""Provenance that tells a refactor from a change of numbers (ledger/provenance.py, ledger/canaries.py,
docs/ledger.md "Canaries"), on planted changes in a throwaway git repository: a move with its imports
updated keeps a result fresh with no canary; a behaviour-preserving rewrite keeps it fresh by its
canary; a changed constant, whether the canary's tiny run uses it or not, makes it stale; a change of
a named setting counts only for the results that name it."""
import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from ledger import canaries
from ledger.canaries import Canary, CanaryBook, record_baselines
from ledger.provenance import Status, changed_producers, code_fingerprint, freshness
from ledger.results import RESULTS, Result

MAKE = '''SCALE = 2.0
SPECS = {"small": 1.5, "large": 7.0}
FULL_SIZE_PROMPTS = 512


def compute(values, spec):
    return [SCALE * value * SPECS[spec] for value in values]
'''
"""The producer: ``SCALE`` and ``SPECS["small"]`` reach the canary's tiny run, ``FULL_SIZE_PROMPTS``
(what the result's full-size run would use) does not."""
REFACTORED = '''SCALE = 2.0
SPECS = {"small": 1.5, "large": 7.0}
FULL_SIZE_PROMPTS = 512


def _scaled(value):
    """A helper split out of compute: the same operations in the same order."""
    return SCALE * value


def compute(values, spec):
    factor = SPECS[spec]
    return [_scaled(value) * factor for value in values]
'''


def _git(root: Path, *arguments: str) -> str:
    return subprocess.run(["git", *arguments], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def _commit(root: Path, files: dict[str, str | None], message: str) -> str:
    for path, text in files.items():
        if text is None:
            (root / path).unlink()
            continue
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", message)
    return _git(root, "rev-parse", "HEAD")


def _toy_canary(root: Path) -> Canary:
    """Runs ``toy/make.py``'s ``compute`` (read afresh from the tree: what the module holds now) on two numbers."""
    def run(shop):
        namespace: dict = {}
        exec(compile((root / "toy/make.py").read_text(), "toy/make.py", "exec"), namespace)
        (shop.folder / "out.json").write_text(json.dumps({"values": namespace["compute"]([0.1, 3.0], "small"),
                                                          "seconds": 0.5, **namespace.get("REPORTED_TOO", {})}))
    return Canary("toy", run, ("out.json",), None, "nothing", canaries.FLOAT64)


RESULT = Result("figures/r.json", "make r", ("toy/",), canary="toy")


@pytest.fixture
def repository(tmp_path, monkeypatch):
    """A repository whose result was made at its first commit, with the toy canary's baseline
    recorded at that commit; the toy package importable (for its full-size settings)."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.org")
    _git(root, "config", "user.name", "t")
    first = _commit(root, {"toy/__init__.py": "", "toy/make.py": MAKE, "toy/run.py": "from toy.make import compute\n"},
                    "first")
    (root / "ledger").mkdir()
    (root / "figures").mkdir()
    (root / "figures/r.json").write_text(json.dumps({"git_commit": first, "spec": "small"}))
    _commit(root, {}, "the result")
    monkeypatch.syspath_prepend(str(root))
    canary = {"toy": _toy_canary(root)}
    _forget_toy()
    record_baselines(root, (RESULT,), canary)
    return root, canary


def _forget_toy() -> None:
    """Drop the imported toy modules, so that the next import reads the tree as it is now."""
    for name in [name for name in sys.modules if name == "toy" or name.startswith("toy.")]:
        del sys.modules[name]


def _state(root: Path, canary: dict, result: Result = RESULT):
    _forget_toy()
    return freshness(result, root, canaries=CanaryBook(root, (result,), canaries=canary))


def test_a_behaviour_preserving_refactor_is_kept_fresh_by_its_canary(repository):
    root, canary = repository
    _commit(root, {"toy/make.py": REFACTORED}, "split out a helper")
    assert code_fingerprint(REFACTORED) != code_fingerprint(MAKE)
    state = _state(root, canary)
    assert state.status is Status.FRESH and state.canary == "toy", state.detail
    assert "verified by canary toy" in state.detail and "blind to: nothing" in state.detail
    assert _state(root, {}, Result(RESULT.path, RESULT.command, RESULT.producers)).status is Status.STALE


@pytest.mark.parametrize("planted, reached_by_the_canary", [
    ("SCALE = 2.0000001", True),
    ("FULL_SIZE_PROMPTS = 256", False),
])
def test_a_changed_constant_makes_the_result_stale(repository, planted, reached_by_the_canary):
    root, canary = repository
    name = planted.split(" = ")[0]
    _commit(root, {"toy/make.py": "\n".join(planted if line.startswith(f"{name} = ") else line
                                            for line in REFACTORED.splitlines()) + "\n"}, "a constant")
    state = _state(root, canary)
    assert state.status is Status.STALE
    expected = "differs: the numbers moved" if reached_by_the_canary else f"full-size settings changed: {name}"
    assert expected in state.detail, state.detail


def test_a_named_setting_counts_only_for_the_results_that_name_it(repository):
    root, canary = repository
    _commit(root, {"toy/make.py": REFACTORED.replace('"large": 7.0', '"large": 8.0')}, "another spec")
    assert _state(root, canary).status is Status.FRESH
    (root / "figures/r.json").write_text(json.dumps({"git_commit": json.loads((root / "figures/r.json").read_text())
                                                     ["git_commit"], "spec": "small", "compared_with": "large"}))
    state = _state(root, canary)
    assert state.status is Status.STALE and "SPECS[large]" in state.detail


def test_a_baseline_made_after_the_numbers_moved_does_not_vouch(repository):
    root, canary = repository
    _commit(root, {"toy/make.py": MAKE.replace("SCALE = 2.0", "SCALE = 3.0")}, "new numbers")
    (root / "ledger/canaries.json").unlink()
    _forget_toy()
    record_baselines(root, (RESULT,), canary)
    _commit(root, {}, "baseline after the change")
    state = _state(root, canary)
    assert state.status is Status.STALE and "no baseline at a commit where this result was fresh" in state.detail


def test_a_move_with_its_imports_updated_is_no_change_and_an_edit_in_the_move_is(repository):
    root, _ = repository
    made = json.loads((root / "figures/r.json").read_text())["git_commit"]
    _git(root, "mv", "toy/make.py", "toy/core.py")
    (root / "toy/run.py").write_text("from toy.core import compute\n")
    moved = Result(RESULT.path, RESULT.command, ("toy/",))
    assert changed_producers(root, moved.producers, made) == []
    assert freshness(moved, root).status is Status.FRESH
    (root / "toy/run.py").write_text("from toy.core import compute as calculate\n")
    assert changed_producers(root, moved.producers, made) == ["toy/run.py"]
    (root / "toy/run.py").write_text("from toy.core import compute\n")
    (root / "toy/core.py").write_text(MAKE.replace("SCALE = 2.0", "SCALE = 2.5"))
    assert changed_producers(root, moved.producers, made) == ["toy/core.py"]


@pytest.mark.parametrize("before, after, renamed, same", [
    ("from a.b import f\n", "from a.c.b import f\n", {"a.b": "a.c.b"}, True),
    ("import a.b\n", "import a.c.b\n", {"a.b": "a.c.b"}, True),
    ("from a import b\n", "from a.c import b\n", {"a.b": "a.c.b"}, True),
    ("from a import b\n", "from a.c import d as b\n", {"a.b": "a.c.d"}, True),
    ("from a.b import f\n", "from a.b import f\n", {"a.b": "a.c.b"}, False),
    ("from a.b import f\n", "from a.c.b import g\n", {"a.b": "a.c.b"}, False),
    ("x = 'a.b'\n", "x = 'a.c.b'\n", {"a.b": "a.c.b"}, False),
])
def test_moved_modules_are_named_by_their_new_names(before, after, renamed, same):
    assert (code_fingerprint(before, "p.m", renamed) == code_fingerprint(after, "p.m")) is same


def test_relative_imports_are_read_as_the_absolute_ones():
    assert code_fingerprint("from .b import f\n", "a.m") == code_fingerprint("from a.b import f\n", "a.n")
    assert code_fingerprint("from ..b import f\n", "a.c.m") == code_fingerprint("from a.b import f\n", "x")


@pytest.mark.parametrize("key, volatile", [("load_average_at_start", True), ("smc_seconds", True), ("wall_s", True),
                                           ("tokens_per_s", True), ("learning_rate", False), ("rate_over_gamma4", False),
                                           ("num_steps", False), ("particles", False)])
def test_what_says_how_a_command_ran_is_volatile_and_what_it_computed_with_is_not(key, volatile):
    assert bool(canaries.VOLATILE_KEY.fullmatch(key)) is volatile


def test_the_canonical_form_leaves_out_what_says_where_and_when_and_keeps_every_number_as_it_is():
    assert canaries._canonical({"seconds": 1.0, "git_commit": "abc", "loss": 0.1, "out": "/w/x"}, "/w") == {
        "loss": 0.1, "out": "<workshop>/x"}
    assert canaries._canonical({"loss": 0.1 + 2 ** -56}, "/w")["loss"] == 0.1 + 2 ** -56 != 0.1
    assert canaries._canonical([float("nan"), "nan", float("inf")], "/w") == ["nan", "nan", "inf"]
    moved = canaries._canonical(["rows (empirical.yardsticks.hand_built.served_rows)", "empirical/training/model.py"], "/w")
    assert moved == canaries._canonical(["rows (empirical.hand_built.served_rows)", "empirical/model.py"], "/w") == [
        "rows (served_rows)", "py"]


WITHOUT_CANARY = ("figures/competence/ceiling-lower-",)
"""Results that have no canary yet (``benchmarks/ceiling_lower_bounds.py``, issue 67): any change of their
producers sends them stale, which is safe (never a false "fresh") but costs a remake."""


def test_every_result_names_a_known_canary_and_timings_name_none():
    assert {result.canary for result in RESULTS} - {None} <= set(canaries.CANARIES)
    for result in RESULTS:
        timing = result.path.startswith(("figures/benchmarks/", "figures/cpu-small/benchmark"))
        assert result.timing == timing, result.path
        assert (result.canary is None) == (timing or result.path.startswith(WITHOUT_CANARY)), result.path


def test_a_registry_entry_the_result_does_not_name_is_no_change(repository):
    """The static rule without a canary: a module-level dict's entries count only where the result's
    JSON names their key (``spec: small``), and an added entry is no change either."""
    root, _ = repository
    plain = Result(RESULT.path, RESULT.command, RESULT.producers)
    _commit(root, {"toy/make.py": MAKE.replace('"large": 7.0', '"large": 8.0, "huge": 9.0')}, "other entries")
    assert freshness(plain, root).status is Status.FRESH
    _commit(root, {"toy/make.py": MAKE.replace('"small": 1.5', '"small": 1.25')}, "the named entry")
    state = freshness(plain, root)
    assert state.status is Status.STALE and "toy/make.py" in state.detail


@pytest.mark.parametrize("path, producers, matches", [
    ("a/b.py", ("a/",), True), ("a/b.py", ("a/b.py",), True), ("ab.py", ("a",), False),
    ("m/r/checkpoint/w.safetensors", ("m/", "!m/*/checkpoint/*.safetensors"), False),
    ("m/r/curve.jsonl", ("m/", "!m/*/checkpoint/*.safetensors"), True),
])
def test_producers_are_read_as_git_pathspecs(path, producers, matches):
    from ledger.provenance import matches_producers
    assert matches_producers(path, producers) is matches


def test_a_key_the_code_now_adds_to_its_output_leaves_the_old_numbers_to_judge(repository):
    """What a result holds is what the old code wrote: a number the code now writes besides (a new
    key) is not compared, a number under an old key is."""
    root, canary = repository
    _commit(root, {"toy/make.py": REFACTORED + 'REPORTED_TOO = {"added_later": 3.0}\n'}, "a new output")
    assert _state(root, canary).status is Status.FRESH
    _commit(root, {"toy/make.py": REFACTORED + 'REPORTED_TOO = {"values": [1.0]}\n'}, "an old key, other numbers")
    assert "differs: the numbers moved" in _state(root, canary).detail


def _song(outputs: dict, defaults: dict | None = None) -> canaries.Song:
    return canaries.Song(outputs, defaults or {})


BASELINE = {"losses": [2.5, 1e-3, 0.0], "count": 7, "verdict": "holds", "nested": {"kl": 0.25}}
"""A canary's outputs at its baseline: floats of several sizes (one zero), an integer, a verdict."""


@pytest.mark.parametrize("tolerance", [canaries.FLOAT64, canaries.FLOAT32], ids=["float64", "float32"])
def test_a_float_moved_within_the_tolerance_agrees_and_one_moved_past_it_is_named(tolerance):
    """|now - then| <= atol + rtol |then|: a move of a tenth of the allowance agrees, of twice it is
    caught and named with both values, for a large number, a small one and zero."""
    then = _song(BASELINE)
    assert canaries.disagreement(then, _song(BASELINE), tolerance) is None
    for index in range(3):
        value = BASELINE["losses"][index]
        for share, agrees in ((0.1, True), (2.0, False)):
            moved = list(BASELINE["losses"])
            moved[index] = value + share * tolerance.allowed(value)
            found = canaries.disagreement(then, _song({**BASELINE, "losses": moved}), tolerance)
            assert (found is None) is agrees, (index, share, found)
            if not agrees:
                assert found.startswith(f"losses[{index}]: {value!r} -> {moved[index]!r}"), found


def test_the_worst_float_is_named_and_integers_strings_and_shapes_are_exact():
    tolerance = canaries.FLOAT64
    then = _song(BASELINE)
    far = {**BASELINE, "losses": [2.5 * (1 + 1e-6), 1e-3 * (1 + 1e-3), 0.0]}
    assert canaries.disagreement(then, _song(far), tolerance).startswith("losses[1]:")
    for changed, where in (({"count": 8}, "count: 7 -> 8"), ({"verdict": "fails"}, "verdict: 'holds' -> 'fails'"),
                           ({"losses": [2.5, 1e-3]}, "losses: '3 items' -> '2 items'"),
                           ({"nested": {}}, "nested.kl: 0.25 -> '(absent)'"),
                           ({"count": 7.0}, "count: 7 -> 7.0")):
        assert canaries.disagreement(then, _song({**BASELINE, **changed}), tolerance) == where
    assert canaries.disagreement(then, _song({**BASELINE, "added_later": 3.0}), tolerance) is None
    assert canaries.disagreement(_song(BASELINE, {"steps": "6"}), _song(BASELINE, {"steps": "8", "new": "1"}),
                                 tolerance) == "option steps: default 6 -> 8"


def test_a_strings_numbers_are_compared_within_the_tolerance_and_its_words_exactly():
    """A verdict that quotes a measured number (``max |gamma_r - g^r| = 1.1e-16``, 2.2e-16 on AVX512
    kernels) agrees when the number does; a number moved past the tolerance is named with its place
    in the string; other words, or a digit inside a name, are a difference of the text."""
    tolerance = canaries.FLOAT32
    then = _song({"verdicts": ["S = 4 > p = 2: gamma_1 in [0.64, 0.664]; max |gamma_r - g^r| = 1.1e-16"]})
    for text, found in (
            ("S = 4 > p = 2: gamma_1 in [0.64, 0.664]; max |gamma_r - g^r| = 2.2e-16", None),
            ("S = 4 > p = 2: gamma_1 in [0.64, 0.665]; max |gamma_r - g^r| = 1.1e-16",
             "verdicts[0] (its number 4): 0.664 -> 0.665, |difference| 0.001 > 1.66e-05 allowed"),
            ("S = 4 > p = 2: gamma_2 in [0.64, 0.664]; max |gamma_r - g^r| = 1.1e-16", "verdicts[0]: "),
            ("S = 4 > p = 2: gamma_1 in [0.64, 0.664]; max |gamma_r - g^r| = 1.1e-16 (fails)", "verdicts[0]: ")):
        said = canaries.disagreement(then, _song({"verdicts": [text]}), tolerance)
        assert (said is None) if found is None else said.startswith(found), (text, said)


def test_a_song_packs_into_the_record_and_back():
    song = _song({"out.json": {**BASELINE, "tiny": 5e-324, "exact": 0.1 + 2 ** -56}}, {"steps": "6"})
    assert canaries.Song.unpacked(song.packed()) == song


def test_a_change_that_moves_the_numbers_less_than_the_tolerance_is_kept_fresh_and_more_is_not(repository):
    """The blind spot the tolerance buys, and its edge: a producer whose numbers move by a part in
    1e13 (within FLOAT64's 1e-9) is fresh by its canary; by a part in 1e7, stale."""
    root, canary = repository
    for factor, fresh in (("1e-13", True), ("1e-7", False)):
        _commit(root, {"toy/make.py": REFACTORED.replace("return SCALE * value", f"return SCALE * value * (1 + {factor})")},
                f"a move of {factor}")
        state = _state(root, canary)
        assert (state.status is Status.FRESH) is fresh, state.detail
        if not fresh:
            assert "differs: the numbers moved (out.json.values[1]: 9.0 -> 9.0000009" in state.detail, state.detail


def test_a_baseline_of_another_version_of_the_canary_does_not_vouch(repository):
    """A canary whose run changed (here: a third number) is another witness: its old baseline's
    numbers are of another computation."""
    root, canary = repository
    _commit(root, {"toy/make.py": REFACTORED}, "split out a helper")

    def three_numbers(shop):
        namespace: dict = {}
        exec(compile((root / "toy/make.py").read_text(), "toy/make.py", "exec"), namespace)
        (shop.folder / "out.json").write_text(json.dumps({"values": namespace["compute"]([0.1, 3.0, 5.0], "small")}))
    other = {"toy": dataclasses.replace(canary["toy"], run=three_numbers)}
    state = _state(root, other)
    assert state.status is Status.STALE and "another version of the canary" in state.detail, state.detail


def test_a_new_comparison_judges_the_baselines_numbers_again_and_redoes_a_kept_verification(repository):
    """A baseline's numbers are data: a canary whose tolerance changed (its run the same) reads them
    again, and a verification the record keeps from the old comparison is judged again, not reused.
    A move of a part in 1e7 is stale under FLOAT64 and fresh under FLOAT32."""
    root, canary = repository
    _commit(root, {"toy/make.py": REFACTORED.replace("return SCALE * value", "return SCALE * value * (1 + 1e-7)")},
            "a move of 1e-7")
    _forget_toy()
    strict = CanaryBook(root, (RESULT,), canaries=canary)
    assert freshness(RESULT, root, canaries=strict).status is Status.STALE
    record = canaries.load_record(root)
    record["verified"].update(strict.sung)
    canaries.write_record(root, record)
    looser = {"toy": dataclasses.replace(canary["toy"], tolerance=canaries.FLOAT32)}
    assert canaries.canary_digest(looser["toy"]) == canaries.canary_digest(canary["toy"])
    state = _state(root, looser)
    assert state.status is Status.FRESH and "rtol 1e-05" in state.detail, state.detail


def test_a_fitted_concentration_is_judged_by_the_losses_it_gives_and_every_other_float_by_the_tolerance():
    """An optimiser's argmin (FITTED_KEY's places) may move anywhere, as OpenBLAS's kernel sets moved a
    flat direction's concentration from 637.5 to 28.7, without a disagreement; the same move of a loss
    beside it, or of a number whose name only resembles a fitted one, is caught."""
    then = {"competence.json": {"ngram_concentrations": {"ngram 3": [53.665, 38.441]}, "loss": 2.5,
                                "variable_order": {"concentrations": [1.5], "loss": 2.4}}}
    for where, path, fitted in (
            ("competence.json.ngram_concentrations.ngram 3[1]", ("ngram_concentrations", "ngram 3", 1), True),
            ("competence.json.variable_order.concentrations[0]", ("variable_order", "concentrations", 0), True),
            ("competence.json.variable_order.loss", ("variable_order", "loss"), False),
            ("competence.json.loss", ("loss",), False)):
        assert (canaries.FITTED_KEY.fullmatch(where) is not None) is fitted
        now = json.loads(json.dumps(then))
        node = now["competence.json"]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] *= 20.0
        found = canaries.disagreement(_song(then), _song(now), canaries.FLOAT32)
        assert (found is None) is fitted, (where, found)
        if not fitted:
            assert found.startswith(where), found
    shape = json.loads(json.dumps(then))
    shape["competence.json"]["ngram_concentrations"]["ngram 3"].append(1.0)
    assert canaries.disagreement(_song(then), _song(shape), canaries.FLOAT32).startswith(
        "competence.json.ngram_concentrations.ngram 3: '2 items' -> '3 items'")


def _config_class(**fields):
    """A frozen dataclass named ``Config`` with ``fields`` as ``name=(type, default)``."""
    return dataclasses.make_dataclass("Config", [(name, kind, dataclasses.field(default=default))
                                                 for name, (kind, default) in fields.items()], frozen=True)


def _settings_of(monkeypatch, value) -> dict[str, str]:
    """The settings :func:`ledger.canaries.settings` records for a module whose one constant is ``value``."""
    module = types.ModuleType("planted_settings")
    module.PRESETS = {"point": value}
    monkeypatch.setitem(sys.modules, "planted_settings", module)
    return canaries.settings(["planted_settings"], {})


def test_a_field_added_with_its_default_leaves_a_setting_as_it_was_and_a_changed_value_or_default_does_not(
        monkeypatch):
    """A config that gains a field whose default keeps the old behaviour (a new training option, off)
    is written as it was, so the results that name it stay fresh; a preset that sets the new field,
    a changed value and a changed default each change the settings."""
    before = _config_class(steps=(int, 0), rate=(float, 1e-3))
    after = _config_class(steps=(int, 0), rate=(float, 1e-3), soft=(bool, False))
    old = _settings_of(monkeypatch, before(steps=8))
    new = _settings_of(monkeypatch, after(steps=8))
    shared = set(old) & set(new)
    assert "PRESETS[point]" in shared and "default:Config.rate" in shared
    assert {key: old[key] for key in shared} == {key: new[key] for key in shared}
    assert set(new) - set(old) == {"default:Config.soft"}
    for changed, entry in ((after(steps=8, soft=True), "PRESETS[point]"), (after(steps=9), "PRESETS[point]"),
                           (_config_class(steps=(int, 0), rate=(float, 3e-4), soft=(bool, False))(steps=8),
                            "default:Config.rate")):
        assert _settings_of(monkeypatch, changed)[entry] != new[entry], changed


SING = ("import sys; from ledger.canaries import CANARIES, REPOSITORY, sing; from hmmtf.commands.ledger import "
        "command_line; print(sing(CANARIES[sys.argv[1]], REPOSITORY, command_line())[0].packed())")
"""Runs the canary named by its argument in a process of its own and prints its song."""


LOWEST_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "OPENBLAS_CORETYPE": "Prescott"}
"""Every library a canary's numbers pass through at its plainest kernels: torch's scalar ones and
OpenBLAS's generic x86-64 core (numpy's and scipy's copies; L-BFGS-B's vector steps run on it); numpy's
own dispatched loops are turned off by :func:`_lowest_kernels`."""


def _lowest_kernels() -> dict[str, str]:
    """:data:`LOWEST_KERNELS` and every numpy dispatch target this processor runs, disabled."""
    from numpy._core import _multiarray_umath
    return {**LOWEST_KERNELS, "NPY_DISABLE_CPU_FEATURES": " ".join(_multiarray_umath.__cpu_dispatch__)}


def _sung_under(name: str, kernels: dict[str, str], threads: int) -> canaries.Song:
    environment = {**os.environ, **kernels, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-c", SING, name], cwd=canaries.REPOSITORY, env=environment,
                          capture_output=True, text=True, check=True)
    return canaries.Song.unpacked(done.stdout.strip().splitlines()[-1])


def _floats(value, path: tuple = ()) -> list[tuple[tuple, float]]:
    """Every float of the parsed JSON ``value`` with the keys and indices that lead to it."""
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _floats(item, (*path, key))]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _floats(item, (*path, index))]
    return [(path, value)] if isinstance(value, float) else []


@pytest.mark.long_running  # two runs of a canary that trains its tiny network: about a minute each on a core
@pytest.mark.timeout(900)
def test_a_baseline_sung_on_the_plainest_kernels_and_one_thread_agrees_on_this_processors_and_two_threads():
    """The canary of the 128-state competence result, a float32 network trained 6 steps, in-context
    predictors fitted by L-BFGS-B and a float64 SMC, sung under every library's plainest kernels
    (:func:`_lowest_kernels`) with one OpenMP thread and under this processor's own (AVX2 or AVX512)
    with two: other bits in some floats, agreement within FLOAT32 (the fitted concentrations judged
    by the losses they give). A float of the baseline moved by three times its allowance is caught; by a third
    of it, not."""
    if canaries.environment()["cpu"] not in ("AVX2", "AVX512"):
        pytest.skip("this processor has no AVX2 kernels to compare with the scalar ones")
    name = "competence-bound"
    tolerance = canaries.CANARIES[name].tolerance
    baseline = _sung_under(name, _lowest_kernels(), 1)
    now = _sung_under(name, {}, 2)
    moved = [where for (where, first), (_, second) in zip(_floats(baseline.outputs), _floats(now.outputs))
             if first != second]
    assert moved, "the two kernel sets gave the same bits: nothing was shown"
    assert canaries.disagreement(baseline, now, tolerance) is None
    computed = [(path, value) for path, value in _floats(baseline.outputs)
                if "ngram_concentrations" not in path and "variable_order" not in path]
    (*path, last), value = max(computed, key=lambda item: abs(item[1]))
    for share, caught in ((3.0, True), (1 / 3, False)):
        planted = json.loads(json.dumps(baseline.outputs))
        node = planted
        for key in path:
            node = node[key]
        node[last] = value + share * tolerance.allowed(value)
        found = canaries.disagreement(canaries.Song(planted, baseline.defaults), now, tolerance)
        assert (found is not None) is caught, (share, found)
