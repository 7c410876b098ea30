# One entry point for developers and CI. `make test` works on a machine with only Python 3.11+,
# Java 17 and Node: it creates .venv when missing, installs everything, then lints, type-checks and tests.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NPM_STAMP := node_modules/.installed
UV_VERSION := 0.13.9
# checkov has an environment of its own: its pins conflict with the project's. Inside .venv, so git, ruff,
# mypy and `make clean` treat it as they treat .venv.
CHECKOV_VERSION := 3.3.30
CHECKOV_VENV := $(VENV)/checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
# twine checks what `make dist` builds, run by uv from its own cached environment (no pin to share with the project's).
TWINE_VERSION := 6.2.0

.PHONY: lock install lint typecheck test unit functional bench demo tools clean checkov-env checkov dist

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	$(PYTHON) -m venv $(VENV)

# uv installs the same pins as pip, about twice as fast on a fresh machine (94 s against 45 s here).
$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)

$(STAMP): pyproject.toml requirements-lock.txt | $(BIN)/uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -c requirements-lock.txt -e ".[infra,pipeline,offline,dev,cli]"
	@touch $(STAMP)

# The CDK command line pinned in package.json (npx cdk ..., and the infra tests' `cdk synth`).
$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(NPM_STAMP)

install: $(STAMP) $(NPM_STAMP)

# checkov, pinned, in its own environment; tests/infra/test_checkov.py runs it on the templates the infra
# tests synthesize.
$(CHECKOV_STAMP): Makefile | $(BIN)/uv
	$(BIN)/uv venv --quiet --allow-existing --python $(PYTHON) $(CHECKOV_VENV)
	$(BIN)/uv pip install --quiet --python $(CHECKOV_VENV)/bin/python checkov==$(CHECKOV_VERSION)
	@touch $(CHECKOV_STAMP)

checkov-env: $(CHECKOV_STAMP)

# checkov on the default stack as `cdk synth` writes it (the tests also check the other variants).
checkov: install checkov-env
	npx cdk synth --quiet --no-notices --output cdk.out
	$(CHECKOV_VENV)/bin/checkov --directory cdk.out --framework cloudformation --skip-download --compact

# The distribution: the sdist, and the wheel built from it (so the sdist is known to be whole), in dist/,
# each checked by twine as PyPI would read it. The version is pyproject.toml's.
dist: | $(BIN)/uv
	rm -rf dist
	$(BIN)/uv build --quiet --out-dir dist
	$(BIN)/uv tool run --quiet twine@$(TWINE_VERSION) check --strict dist/*
	@ls dist

# Re-pin requirements-lock.txt to what .venv holds now (after a change of pyproject.toml's ranges).
lock: $(STAMP)
	{ sed -n '1,3p' requirements-lock.txt; $(BIN)/uv pip freeze --python $(BIN)/python --exclude-editable | grep -v '^uv=='; } > requirements-lock.txt.new
	mv requirements-lock.txt.new requirements-lock.txt

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

# Two workers: most tests wait on real time (the emulator's queues and workflows), so two halve the
# wait; more than two on two cores made timing-sensitive tests flaky. checkov's environment installs
# beside the installs and checks before them (two jobs), so it adds no wall time of its own. Work
# stealing: a worker left idle takes tests queued for the other, so the few long real-time tests at the
# end do not run one after another on one worker (tests/e2e and tests/infra: 193 s against 222 s).
test: tools
	@$(MAKE) --no-print-directory -j2 --output-sync=target checkov-env lint typecheck
	$(BIN)/pytest -n 2 --dist worksteal

unit: install
	$(BIN)/pytest tests/unit

functional: install
	$(BIN)/pytest tests/functional

bench: install
	$(BIN)/python -m benchmarks.renewal_cost
	$(BIN)/python -m benchmarks.extender_throughput
	$(BIN)/python -m benchmarks.pipeline_throughput
	$(BIN)/python -m benchmarks.chaos
	$(BIN)/python -m benchmarks.cold_start
	$(BIN)/python -m benchmarks.backfill

# Java runs Spark (the pipeline tests, the demo); Node runs the pinned CDK command line that renders
# the workflow and synthesizes the stack. Both are checked before anything is installed. The CDK supports
# Node 22 and 24 (https://docs.aws.amazon.com/cdk/v2/guide/node-versions.html); any other version gets a
# note and goes on, Node 20 included (past its end of life, it still runs this project's CDK).
tools:
	@java -version >/dev/null 2>&1 || { echo "make $(MAKECMDGOALS) needs Java 17 for Spark: install a JDK or JRE 17 (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17), then run make $(MAKECMDGOALS) again" >&2; exit 1; }
	@node --version >/dev/null 2>&1 || { echo "make $(MAKECMDGOALS) needs Node.js for the CDK: install Node 22 or 24 (https://nodejs.org), then run make $(MAKECMDGOALS) again" >&2; exit 1; }
	@major=$$(node --version | sed 's/^v//; s/[.].*//'); case "$$major" in \
	  22|24) ;; \
	  20) echo "note: Node 20 works here, but it is past its end of life (2026-04-30) and the CDK's support for it ended on 2026-10-30; the CDK supports Node 22 and 24 (https://nodejs.org)" >&2 ;; \
	  *) echo "note: Node $$major is not one the CDK supports; it supports Node 22 and 24 (https://nodejs.org)" >&2 ;; \
	esac

# The whole processor offline (moto, local Spark): a mixed scenario, its report and timeline in out/demo.
demo: tools install
	$(BIN)/python -m offline demo --out out/demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis node_modules cdk.out dist
