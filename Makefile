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
	$(PYTHON) -m pip install -q -e ".[notebooks,test,ray]"

# every notebook through papermill on the toy profile (stored back into notebooks/), figures/, results/toy/, README table
study: setup
	$(PYTHON) -m bildlab.cli study

# unit tests, then the notebooks with nbval (every cell runs; the cells marked NBVAL_CHECK_OUTPUT must reproduce)
test: setup
	$(PYTHON) -m pytest -q tests
	$(PYTHON) -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env notebooks

bench: setup
	$(PYTHON) benchmarks/bench_decoding.py
