"""The command line without the installed ``hmmtf`` script (:func:`hmmtf.main`):
``python -m hmmtf SUBCOMMAND [options]`` from a checkout's root, or ``python PATH/hmmtf/__main__.py
SUBCOMMAND [options]`` from anywhere, which runs the code of the checkout the path names (what the
tests' and benchmarks' subprocesses do; ``-m`` imports the working folder's ``hmmtf`` first)."""
import sys
from pathlib import Path

if not __package__:  # run by its path: the checkout, not this folder, goes first on the import path
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from hmmtf import main  # noqa: E402  (the import path must be set first)

sys.exit(main())
