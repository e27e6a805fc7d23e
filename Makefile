# Two commands for a new user (README): `make demo` and `make test`.
# Both create .venv and install what they need. torch is pinned to the CPU wheel first so that
# pip never pulls a multi-GB CUDA build.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
# real corpora: ../shared/data when it exists (else nmt prepare downloads to ~/.cache/nmt/data)
NMT_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export NMT_DATA_DIR

.PHONY: demo recipe recipe-60 recipe-60-bidirectional test install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[test,plot,ct2,hf,serve]"
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	NMT="$(PY) -m nmt" sh recipes/demo.sh runs/demo

recipe: $(VENV)/.installed
	NMT="$(PY) -m nmt" sh recipes/multi30k-en-de.sh runs/multi30k-en-de

recipe-60: $(VENV)/.installed  # two runs (seeds 1, 2; side by side, 60 min each on half the cores), ensembled, alpha chosen on valid
	NMT="$(PY) -m nmt" sh recipes/multi30k-en-de-ensemble.sh runs/multi30k-en-de-ensemble

recipe-60-bidirectional: $(VENV)/.installed  # a left-to-right and a right-to-left run (side by side, 60 min each on half the cores), reranked
	NMT="$(PY) -m nmt" sh recipes/multi30k-en-de-bidirectional.sh runs/multi30k-en-de-bidirectional

test: $(VENV)/.installed
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) *.egg-info
