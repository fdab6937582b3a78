# `make train` and `make test` each create .venv (with pip) when it is missing, then run.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: train test test-all lint typecheck unit unit-all clean constraints upgrade

# Installs take the exact versions CI tested from requirements/constraints.txt (ranges: pyproject.toml),
# and the engine from where requirements/engine.txt says: with --upgrade, the newest version that it and
# pyproject.toml's range allow (pip keeps an installed engine whose version is in the range otherwise;
# --upgrade touches only the requirements named here, the rest keeps the pins).
$(VENV)/.installed: pyproject.toml requirements/constraints.txt requirements/engine.txt $(wildcard engine/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install --upgrade -c requirements/constraints.txt -r requirements/engine.txt -e ".[dev]"
	touch $@

## Install again, the engine included: after pointing requirements/engine.txt at a newer engine or, from
## an index, to take its newest version in pyproject.toml's range (make alone sees no file changed then).
upgrade:
	rm -f $(VENV)/.installed
	$(MAKE) $(VENV)/.installed

## Train the default experiment, then test its best checkpoint.
train: $(VENV)/.installed
	$(PY) -m project fit
	$(PY) -m project test --ckpt_path best

## Lint, type-check and run the fast tests (CPU, offline; the tests marked `slow` are left out).
test: lint typecheck unit

## Lint, type-check and run every test, the long end-to-end ones (marked `slow`) included.
test-all: lint typecheck unit-all

# An engine copied into this repo (engine/: its own pyproject.toml, strict mypy, tests) is checked too.
ENGINE := $(wildcard engine/pyproject.toml)
# pytest worker processes (pytest-xdist): each imports torch and Lightning, so one process costs the least
# CPU time for a suite of this size; WORKERS=2 halves the wall time on 2 cores.
# template-only
WORKERS ?= 2
# /template-only
WORKERS ?= 0

# Tests run one torch thread per process unless OMP_NUM_THREADS says otherwise: with the examples' small
# models torch's default pool (a thread per core in each pytest worker) costs more CPU time than it saves
# (the default-fit test: 38 CPU-s on one thread against 171 on the 2-core development machine's default).
TEST_ENV := OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1}

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(VENV)/.installed
	$(PY) -m mypy
	$(if $(ENGINE),cd engine && $(abspath $(PY)) -m mypy)

unit: $(VENV)/.installed
	$(TEST_ENV) $(PY) -m pytest -n $(WORKERS) -m "not slow" --durations=10
	$(if $(ENGINE),cd engine && $(TEST_ENV) $(abspath $(PY)) -m pytest -n 2 -m "not slow" --durations=10)

# template-only
# (a generated repo has neither the generated-repo suites nor their marker)
NOT_GENERATED := -m "not generated_suite"
.PHONY: test-generated
## The complete suites of generated repos (one per logger value; long). SUITE=NAME runs only those whose
## name contains NAME (pytest -k): .ci/run runs `make test-generated SUITE=tensorboard-minimal`.
test-generated: $(VENV)/.installed
	$(TEST_ENV) $(PY) -m pytest -n 2 -m generated_suite $(if $(SUITE),-k "$(SUITE)")
# /template-only

unit-all: $(VENV)/.installed
	$(TEST_ENV) $(PY) -m pytest -n $(WORKERS) $(NOT_GENERATED) --durations=15
	$(if $(ENGINE),cd engine && $(TEST_ENV) $(abspath $(PY)) -m pytest -n 2 --durations=15)

## Refresh requirements/constraints.txt: the newest versions pyproject.toml allows (dependencies and the
## dev extra), resolved by pip-tools' pip-compile; then run `make test` and commit the file if it passes.
## A constraint file set in pip's config (pip-compile ignores it) is passed on.
constraints:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "pip-tools>=7.4"
	CUSTOM_COMPILE_COMMAND="make constraints" $(PY) -m piptools compile --upgrade --quiet --extra=dev --strip-extras --allow-unsafe --no-annotate \
		--no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
		$(addprefix --constraint=,$(PIP_CONFIG_CONSTRAINT)) --output-file=requirements/constraints.txt pyproject.toml requirements/engine.txt
	sed -i '/^-e \|^runwright\b\|^project\b/d' requirements/constraints.txt  # (the engine and this repo: not pins)

PIP_CONFIG_CONSTRAINT = $(shell $(PY) -m pip config list 2>/dev/null | sed -n "s/^global.constraint='\(.*\)'$$/\1/p")

clean:
	rm -rf $(VENV) logs .mypy_cache .ruff_cache .pytest_cache
