# Two commands: `make sweep` runs the default sweep, `make test` lints and tests (what CI runs).
# `make test-fast` is the edit loop: lint and the tests not marked slow (no sweep, no compile, a
# sample of each long walk of refusals; `make test` runs every case).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= all
SNAKEMAKE_ARGS ?=
TORCH_SPEC ?= torch==2.13.0

.PHONY: sweep test test-fast lint lint-fast unit unit-fast bootstrap system clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# A CPU torch first: on this machine kind torch==2.13.0 is a local CPU wheel (a plain
	# `pip install torch` would fetch a multi-GB CUDA build). Override TORCH_SPEC to change it.
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/python -m pip install -q '$(TORCH_SPEC)'
	# CUTLASS accounting needs nvcc: the machine's, else PyPI's (about 350 MB), in the same pip
	# call (one resolve and one editable build of the project, where two calls made each twice).
	$(BIN)/python -m pip install -q -e \
		".[dev$$(command -v nvcc >/dev/null || test -x /usr/local/cuda/bin/nvcc || echo ,nvcc)]"
	touch $@

# Debian packages some slow tests use: Chromium (tests/test_report_html.py renders the report)
# and SLURM with munge (tests/test_slurm.py starts a one-node cluster). Installed here as root
# where apt-get exists; elsewhere this says so and those tests skip, naming what is missing.
# The tests themselves install nothing.
system:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get -q update && \
		DEBIAN_FRONTEND=noninteractive apt-get -q install -y chromium || \
		echo "bootstrap: apt-get could not install chromium; the browser test will skip"; \
	else echo "bootstrap: chromium missing and not root with apt-get; the browser test will skip"; fi
	@if (for t in munged slurmctld slurmd sbatch; do command -v $$t || exit 1; done) >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		profiles/slurm/local-cluster.sh install || \
		echo "bootstrap: apt-get could not install slurm and munge; the SLURM test will skip"; \
	else echo "bootstrap: slurm missing and not root with apt-get; the SLURM test will skip"; fi

bootstrap: $(BIN)/.installed system

sweep: $(BIN)/.installed
	$(BIN)/snakemake --cores $(CORES) $(SNAKEMAKE_ARGS)

lint: lint-fast
	$(BIN)/snakemake --lint --cores 1 >/dev/null

# Tests run on every core (pytest-xdist, one worker a core); the tests that read the tiny sweep
# run on one worker (conftest.py groups them), which makes it once. PYTEST_WORKERS=0 runs them
# all in one process. The 40 slowest tests are listed at the end (where the time goes).
PYTEST_WORKERS ?= auto

unit: bootstrap
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=40

# The fast tier needs only the Python packages and skips `snakemake --lint`, which plans the
# default sweep.
lint-fast: $(BIN)/.installed
	$(BIN)/ruff check src tests workflow
	$(BIN)/ruff format --check src tests workflow
	$(BIN)/snakefmt --check Snakefile workflow/rules

# The fast tier keeps the groups too (conftest.py): the cited figures' engine check, composed
# once on one worker rather than on each; its 15 slowest tests are listed at the end.
unit-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not slow" --durations=15

test: lint unit

test-fast: lint-fast unit-fast

clean:
	rm -rf results .snakemake
