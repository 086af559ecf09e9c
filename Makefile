# The two commands of the README: `make run` (main job on built-in defaults) and `make test`.
# Both create .venv on first use and install what is missing; later calls only check a stamp.
# torch is installed pinned first: a range would let pip fetch a newer CUDA build (several GB).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0

.PHONY: run test test-all bench clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/hmmtf main

test: $(STAMP)
	$(PY) -m pytest -n 2 -m "not slow"

test-all: $(STAMP)
	$(PY) -m pytest -n 2

bench: $(STAMP)
	$(PY) benchmarks/bench_hmm.py

clean-venv:
	rm -rf $(VENV)
