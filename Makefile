# `make train` and `make test` each create .venv (with pip) when it is missing, then run.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: train test test-all lint typecheck unit unit-all clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[dev]"
	touch $@

## Train the default experiment, then test its best checkpoint.
train: $(VENV)/.installed
	$(PY) -m project fit
	$(PY) -m project test --ckpt_path best

## Lint, type-check and run the fast tests (CPU, offline; the tests marked `slow` are left out).
test: lint typecheck unit

## Lint, type-check and run every test, the long end-to-end ones (marked `slow`) included.
test-all: lint typecheck unit-all

lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(VENV)/.installed
	$(PY) -m mypy

unit: $(VENV)/.installed
	$(PY) -m pytest -n 2 -m "not slow" --durations=10

unit-all: $(VENV)/.installed
	$(PY) -m pytest -n 2 --durations=15

clean:
	rm -rf $(VENV) logs .mypy_cache .ruff_cache .pytest_cache
