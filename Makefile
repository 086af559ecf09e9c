# The two commands of the README: `make run` (main job on built-in defaults) and `make test`
# (`make test-all`, what CI runs, adds the long-running tests).
# Both create .venv on first use and install what is missing; later calls only check a stamp.
#
# Every dependency is installed at the exact version of constraints.txt (the lock), so a fresh
# machine runs the code CI ran. The installer is uv, not pip: from nothing, pip took 138-160 s on
# 2 cores (81 s of it byte-compiling all 16,900 files, one at a time), uv 12 s, the same packages
# at the same versions. uv does not read pip's configuration, so the machine's pip find-links and
# extra indexes (here: the local torch wheel) are handed to it, and indexes are searched as pip
# searches them (best match over all).
#
# Bytecode is compiled on import, not by the installer: the suite imports 4,600 of the 16,900
# files, and compiling all of them took 38 s on 2 cores. Every process of the venv keeps it in
# the venv's own cache, .venv/pycache, never beside the sources: a .pth file sets
# sys.pycache_prefix (as PYTHONPYCACHEPREFIX would, unless that is set) and lets bytecode be
# written there even where PYTHONDONTWRITEBYTECODE is set, as on these machines, where each
# process would otherwise compile what it imports again (`import hmmtf`: 11.6 s, not 3.9 s).
# Before the first suite, $(BYTECODE) compiles what the suite imports (see there).
#
# The package metadata (pyproject.toml) keeps ranges; the lock pins torch to the machine's local
# CPU wheel: an unpinned torch would fetch a CUDA build of several GB.
# `make test-latest` runs the suite against the newest releases (torch held at the lock's CPU wheel),
# in its own venv, to see drift early;
# `make lock` rewrites the lock from a fresh resolution.
PYTHON ?= python3
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BYTECODE := $(VENV)/.bytecode
CONSTRAINTS := constraints.txt
TORCH_VERSION := $(shell sed -n 's/^torch==//p' $(CONSTRAINTS))
LATEST_VENV := .venv-latest
LOCK_VENV := .venv-lock
PYTEST_ARGS := -n 2 --dist loadgroup
UV_VERSION := 0.13.9
pip_setting = $(shell $(PYTHON) -m pip config get $(1) 2>/dev/null)
UV_SOURCES = $(addprefix --find-links ,$(call pip_setting,global.find-links)) \
	$(addprefix --extra-index-url ,$(call pip_setting,global.extra-index-url)) --index-strategy unsafe-best-match
# uv pip install into the venv $(1), with this machine's package sources.
uv_install = $(1)/bin/uv pip install --python $(1)/bin/python $(UV_SOURCES)
# The suite's extras: test tools, and TransformerLens for the export's parity tests.
EXTRAS := test,interp
# pip freeze of a venv in the lock's form (torch without its local "+cpu" label).
freeze = $(1)/bin/python -m pip freeze --exclude-editable | sed 's/^torch==.*/torch==$(TORCH_VERSION)/'

.PHONY: run lint test test-slow test-all test-latest bench lock clean-venv wheels unpack-paper

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(call uv_install,$(VENV)) -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	printf '%s\n' 'import os, sys; sys.pycache_prefix = sys.pycache_prefix or os.path.join(sys.prefix, "pycache"); sys.dont_write_bytecode = False' \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/00_bytecode_cache.pth"
	touch $(STAMP)

# The bytecode of what the suite imports, compiled once before its first run, in two processes
# (2 cores): pytest's collection (torch, numpy, scipy, sympy, matplotlib, hypothesis, the project)
# beside the modules tests import only when they run (hmmlearn with scikit-learn and pandas,
# TransformerLens with transformers, torch's dynamo, which the first optimizer step imports, and
# its distributed package; the notebook's kernel, ipykernel with IPython). Without it, a fresh clone's first suite took 96-104 s, because its
# two workers compiled the same files at once; after its 25 s, 80-86 s, as a later suite does.
# A failure here costs only time (the suite reports the error), so it is printed, not fatal.
LAZY_IMPORTS := hmmlearn.hmm, transformer_lens, torch._dynamo, torch.distributed, ipykernel.kernelapp
$(BYTECODE): $(STAMP)
	@echo "compiling the bytecode of what the suite imports (about 25 s, once)"
	@$(PY) -m pytest --collect-only -q -p no:cacheprovider > $(VENV)/bytecode-collection.log 2>&1 & collection=$$!; \
	$(PY) -c "import $(LAZY_IMPORTS)" > $(VENV)/bytecode-imports.log 2>&1 || \
	  echo "bytecode: importing $(LAZY_IMPORTS) failed (the suite will say why; $(VENV)/bytecode-imports.log)"; \
	wait $$collection || echo "bytecode: pytest's collection failed (the suite will say why; $(VENV)/bytecode-collection.log)"
	touch $@

run: $(STAMP)
	$(VENV)/bin/hmmtf main

# ruff on the tree, mypy on the typed cores and import-linter's contracts (pyproject.toml), before
# the suite: under a second, about 2 s and about 3 s. mypy's first run in a venv reads torch's types
# into .mypy_cache (about 25 s of CPU, once).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Two tiers (README, "Tests"): `make test` is the suite without its long-running tests (marker
# long_running: the pipelines end to end, the shipped models' replays, the wheel in a fresh venv,
# the fault injection, the DDP group, ...), the edit-test loop; `make test-slow` runs those alone;
# `make test-all` runs both, and is what CI runs (.ci/run).
test: $(STAMP) $(BYTECODE) lint
	$(PY) -m pytest $(PYTEST_ARGS) -m "not long_running"

test-slow: $(STAMP) $(BYTECODE)
	$(PY) -m pytest $(PYTEST_ARGS) -m long_running

test-all: test test-slow

test-latest:
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install --upgrade --upgrade-strategy eager -e ".[$(EXTRAS)]" "torch==$(TORCH_VERSION)"
	$(call freeze,$(LATEST_VENV)) | diff <(sed '/^#/d' $(CONSTRAINTS)) - || true
	$(LATEST_VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(call uv_install,$(VENV)) -c $(CONSTRAINTS) -e ".[bench]"
	$(PY) benchmarks/bench_hmm.py --json figures/benchmarks/hmm.json
	$(VENV)/bin/hmmtf ledger

lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install "torch==$(TORCH_VERSION)"
	$(LOCK_VENV)/bin/python -m pip install -e ".[$(EXTRAS)]"
	{ sed -n '/^#/p' $(CONSTRAINTS); \
	  $(call freeze,$(LOCK_VENV)); \
	} > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf $(LOCK_VENV)

clean-venv:
	rm -rf $(VENV) $(LATEST_VENV) $(LOCK_VENV)

# The GPU machine (docs/reproduce.md): Python 3.12, its own torch, no network. Its image holds
# every runtime dependency (numpy, scipy, torch, sympy, matplotlib, tqdm, safetensors), so
# `hmmtf reproduce` needs no wheel; the test suite needs hmmlearn. `make wheels` downloads those
# missing, at the lock's versions, as Python 3.12 manylinux wheels into the ignored .whl/; there:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:.
DEVICE_WHEELS := hmmlearn
WHEEL_DIR := .whl
WHEEL_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64

wheels:
	$(PYTHON) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(addprefix --platform ,$(WHEEL_PLATFORMS)) -d $(WHEEL_DIR) \
	  $(foreach name,$(DEVICE_WHEELS),$(shell grep -i '^$(name)==' $(CONSTRAINTS)))

# The results bundle of `hmmtf reproduce --preset paper` (brought back from the GPU machine) into
# figures/paper-scale/, to be committed like every other result. Not figures/paper/: that folder
# holds the 16-state paper stand-in's results (figures/paper/2x4x64, ...).
PAPER_FIGURES := figures/paper-scale

unpack-paper:
	@test -n "$(BUNDLE)" || { echo "BUNDLE: empty; expected make unpack-paper BUNDLE=path/to/paper-results.tar.gz"; exit 2; }
	mkdir -p $(PAPER_FIGURES)
	tar -xzf $(BUNDLE) -C $(PAPER_FIGURES)
	@echo "unpacked $(BUNDLE) into $(PAPER_FIGURES)"
