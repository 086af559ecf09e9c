"""The ``hmmtf`` entry point: every subcommand is registered by the module
:data:`hmmtf.SUBCOMMAND_MODULES` names, and a command line imports that module and no other."""
import argparse
import importlib
import sys

import pytest
from fresh_imports import is_project_module, project_imported_afresh

import hmmtf


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    (action,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return list(action.choices)


@pytest.mark.parametrize("module", sorted(set(hmmtf.SUBCOMMAND_MODULES.values())))
def test_each_module_registers_the_subcommands_the_table_gives_it(module):
    parser = argparse.ArgumentParser()
    importlib.import_module(module).register(parser.add_subparsers())
    assert subcommands(parser) == [name for name, owner in hmmtf.SUBCOMMAND_MODULES.items() if owner == module]


def test_help_lists_every_subcommand_in_the_tables_order():
    assert subcommands(hmmtf.build_parser()) == list(hmmtf.SUBCOMMAND_MODULES)
    assert subcommands(hmmtf.build_parser("no-such-command")) == list(hmmtf.SUBCOMMAND_MODULES)


def project_modules_imported_by(action) -> set[str]:
    """The project's modules imported once ``action()`` has run with none imported before."""
    with project_imported_afresh():
        action()
        return {name for name, module in sys.modules.items() if is_project_module(module)}


def test_a_command_line_imports_what_its_subcommands_module_imports_and_nothing_more(tmp_path, capsys):
    """``hmmtf reproduce --status`` against ``import hmmtf.commands.reproduce``, each afresh
    (:mod:`fresh_imports`)."""
    def status() -> None:
        assert importlib.import_module("hmmtf").main(["reproduce", "--preset", "paper-mini", "--out", str(tmp_path),
                                                     "--status"]) == 2

    by_command_line = project_modules_imported_by(status)
    by_module = project_modules_imported_by(lambda: importlib.import_module("hmmtf.commands.reproduce"))
    assert by_command_line == by_module | {"hmmtf"}
    assert "hmmtf.commands.bounds" not in by_module  # sympy, scipy's optimizers, the bound figures
    assert "has no progress.json" in capsys.readouterr().err
