# Two commands for a new user (README): `make demo` and `make test`.
# Both create .venv and install what they need. torch is pinned and installed first, from pip's
# index: on PyPI, torch==2.13.0 for Linux x86_64 is the CUDA build (several GB, runs on CPUs too);
# `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes PyTorch's CPU-only build.
# The install prints which build it got.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
# real corpora: ../shared/data when it exists (else nmt prepare downloads to ~/.cache/nmt/data)
NMT_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export NMT_DATA_DIR

.PHONY: demo recipe recipe-60 recipe-60-bidirectional recipe-distill recipe-libreoffice \
	recipe-libreoffice-zh-en recipe-libreoffice-en-zh recipe-parse recipe-parse-paper recipe-finetune \
	recipe-wmt14-en-de-base recipe-wmt14-en-de-big recipe-wmt14-en-fr-big test test-avx2 test-bf16 test-fast format docs docs-serve install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
	@$(PY) -c "import torch; print('torch', torch.__version__, '(CUDA ' + torch.version.cuda + ' build)' if torch.version.cuda else '(CPU-only build)')"
	$(PY) -m pip install --quiet -e ".[test,plot,ct2,hf,serve,docs,docx,argos,onnx,ray]"
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	NMT="$(PY) -m nmt" PY="$(PY)" sh recipes/demo.sh runs/demo

recipe: $(VENV)/.installed
	NMT="$(PY) -m nmt" sh recipes/multi30k-en-de.sh runs/multi30k-en-de

recipe-60: $(VENV)/.installed  # two runs (seeds 1, 2; side by side, 60 min each on half the cores), ensembled, alpha chosen on valid
	NMT="$(PY) -m nmt" sh recipes/multi30k-en-de-ensemble.sh runs/multi30k-en-de-ensemble

recipe-60-bidirectional: $(VENV)/.installed  # a left-to-right and a right-to-left run (side by side, 60 min each on half the cores), reranked
	NMT="$(PY) -m nmt" sh recipes/multi30k-en-de-bidirectional.sh runs/multi30k-en-de-bidirectional

recipe-distill: $(VENV)/.installed  # a 30-minute teacher, a student trained on its translations for the rest of the hour, ensembled
	NMT="$(PY) -m nmt" sh recipes/multi30k-en-de-distill.sh runs/multi30k-en-de-distill

recipe-libreoffice-zh-en: $(VENV)/.installed  # LibreOffice help zh->en, 60 min (+ WMT newstest2018, out of domain)
	NMT="$(PY) -m nmt" sh recipes/libreoffice-zh-en.sh runs/libreoffice-zh-en

recipe-libreoffice-en-zh: $(VENV)/.installed  # LibreOffice help en->zh, 60 min
	NMT="$(PY) -m nmt" sh recipes/libreoffice-en-zh.sh runs/libreoffice-en-zh

recipe-libreoffice: $(VENV)/.installed  # both directions, one after the other (two at once slow each other's decoding)
	NMT="$(PY) -m nmt" sh recipes/libreoffice-zh-en.sh runs/libreoffice-zh-en
	NMT="$(PY) -m nmt" sh recipes/libreoffice-en-zh.sh runs/libreoffice-en-zh

recipe-parse: $(VENV)/.installed  # PTB parsing, the variant that parses (per-word output, copies, --well-formed; not the paper's)
	NMT="$(PY) -m nmt" PREPARE_ARGS="--form per-word --copy-pairs" PARSE_ARGS=--well-formed \
	  CONFIG=recipes/ptb-parse-per-word.yaml sh recipes/ptb-parse.sh runs/ptb-per-word

recipe-parse-paper: $(VENV)/.installed  # PTB parsing with the paper's linearisation (XX leaves): test F1 12 on this 3.7K-tree sample
	NMT="$(PY) -m nmt" sh recipes/ptb-parse.sh runs/ptb-parse

BASE ?= runs/multi30k-en-de/average
recipe-finetune: $(VENV)/.installed  # adapt a Multi30k model (BASE: make recipe's by default) to LibreOffice help en->de: plain, and with Multi30k replayed and guarded; against scratch
	NMT="$(PY) -m nmt" PY="$(PY)" sh recipes/finetune-libreoffice-en-de.sh $(BASE) runs/finetune-libreoffice-en-de

# The paper's Table 2 rows on GPUs (docs/gpu.md): torchrun on GPUS processes (default: every GPU torch sees),
# ~25k target tokens per update whatever GPUS is; running the target again resumes the run
recipe-wmt14-en-de-base: $(VENV)/.installed  # Transformer base, WMT14 en->de: 100k updates, the last 5 averaged
	NMT="$(PY) -m nmt" PY="$(PY)" sh recipes/wmt14-en-de-base.sh runs/wmt14-en-de-base

recipe-wmt14-en-de-big: $(VENV)/.installed  # Transformer big, WMT14 en->de: 300k updates, the last 20 averaged
	NMT="$(PY) -m nmt" PY="$(PY)" sh recipes/wmt14-en-de-big.sh runs/wmt14-en-de-big

recipe-wmt14-en-fr-big: $(VENV)/.installed  # Transformer big, WMT14 en->fr (dropout 0.1): 300k updates, the last 20 averaged
	NMT="$(PY) -m nmt" PY="$(PY)" sh recipes/wmt14-en-fr-big.sh runs/wmt14-en-fr-big

LINTED = nmt tests benchmarks scripts recipes
# an AVX2-only CPU's path, taken by any x86 CPU: torch, oneDNN and CTranslate2 kernels, and `auto` -> fp32
AVX2_ONLY = ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 CT2_FORCE_CPU_ISA=AVX2 NMT_PRECISION=fp32
# the same CPU with `auto` forced to bf16: bf16 without bf16 instructions (emulated), whatever the CPU (the
# suite's own pass takes native bf16 where the CPU has AMX/AVX512-BF16)
AVX2_BF16 = ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 CT2_FORCE_CPU_ISA=AVX2 NMT_PRECISION=bf16
test: $(VENV)/.installed  # lint and format check, the suite, its numerics again on the AVX2-only path in fp32 and in bf16, then the documentation site
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(PY) -m pytest -q tests
	$(MAKE) test-avx2
	$(MAKE) test-bf16
	$(MAKE) docs

test-avx2: $(VENV)/.installed  # the tests marked numerics (model, search, export, old checkpoints, benchmark table) on the AVX2-only path
	$(AVX2_ONLY) $(PY) -m pytest -q -m numerics tests

test-bf16: $(VENV)/.installed  # the tests marked numerics with `auto` forced to bf16 on the AVX2-only path (emulated bf16)
	$(AVX2_BF16) $(PY) -m pytest -q -m numerics tests

test-fast: $(VENV)/.installed  # the edit loop: lint, then the suite less the tests marked slow (under 2 minutes on 2 cores)
	$(VENV)/bin/ruff check $(LINTED)
	$(PY) -m pytest -q -m "not slow" tests

format: $(VENV)/.installed  # format the code as `make test` checks it (ruff, line length 110), then lint
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

docs: $(VENV)/.installed  # the site, from docs/ and mkdocs.yml, into site/
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-serve: $(VENV)/.installed  # preview the site on http://127.0.0.1:8001/
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8001

clean:
	rm -rf $(VENV) *.egg-info
