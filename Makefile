# Two commands: `make sweep` runs the default sweep, `make test` lints and tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= all
SNAKEMAKE_ARGS ?=
TORCH_SPEC ?= torch==2.13.0

.PHONY: sweep test lint unit bootstrap clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# A CPU torch first: on this machine kind torch==2.13.0 is a local CPU wheel (a plain
	# `pip install torch` would fetch a multi-GB CUDA build). Override TORCH_SPEC to change it.
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/python -m pip install -q '$(TORCH_SPEC)'
	$(BIN)/python -m pip install -q -e '.[dev]'
	# CUTLASS accounting needs nvcc: the machine's, else PyPI's (about 350 MB).
	command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc || \
		$(BIN)/python -m pip install -q -e '.[dev,nvcc]'
	touch $@

bootstrap: $(BIN)/.installed

sweep: bootstrap
	$(BIN)/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS)

lint: bootstrap
	$(BIN)/ruff check src tests workflow
	$(BIN)/ruff format --check src tests workflow
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint --cores 1 >/dev/null

unit: bootstrap
	$(BIN)/python -m pytest -q

test: lint unit

clean:
	rm -rf results .snakemake
