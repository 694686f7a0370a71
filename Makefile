# The two commands of the README:
#   make study   set up (torch, the package, a Jupyter kernel) and run the study on the toy default
#   make test    set up and run the tests (unit tests and the notebooks through nbval), offline
PYTHON ?= python
TORCH ?= torch==2.13.0
export HF_HUB_OFFLINE = 1
export HF_DATASETS_OFFLINE = 1

.PHONY: setup study test bench

setup:
	$(PYTHON) -m pip install -q "$(TORCH)"
	$(PYTHON) -m pip install -q -e ".[notebooks,test]"

study: setup
	$(PYTHON) -m bildlab.cli demo

test: setup
	$(PYTHON) -m pytest -q

bench: setup
	$(PYTHON) benchmarks/bench_decoding.py
