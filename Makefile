# The two commands of the README:
#   make study   set up (torch, the package, a Jupyter kernel) and run the study on the toy default
#   make test    set up and run the tests, offline
PYTHON ?= python
TORCH ?= torch==2.13.0
export HF_HUB_OFFLINE = 1
export HF_DATASETS_OFFLINE = 1

.PHONY: setup study test bench

setup:
	$(PYTHON) -m pip install -q "$(TORCH)"
	$(PYTHON) -m pip install -q -e ".[notebooks,test]"

# until the toy zoo ships (data/zoo), "study" runs the engine demo; then: bildlab study (all notebooks)
study: setup
	$(PYTHON) -m bildlab.cli demo

test: setup
	$(PYTHON) -m pytest -q tests

bench: setup
	$(PYTHON) benchmarks/bench_decoding.py
