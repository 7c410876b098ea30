# One entry point for developers and CI. `make test` works on a machine with only Python 3.11+,
# Java 17 and Node: it creates .venv when missing, installs everything, then lints, type-checks and tests.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install lint typecheck test unit functional bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[infra,pipeline,dev]"
	@touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest

unit: install
	$(BIN)/pytest tests/unit

functional: install
	$(BIN)/pytest tests/functional

bench: install
	$(BIN)/python -m benchmarks.renewal_cost
	$(BIN)/python -m benchmarks.extender_throughput
	$(BIN)/python -m benchmarks.pipeline_throughput

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
