# One entry point for developers and CI. `make test` works on a machine with only Python 3.13 (and 3.11),
# Java 17 and Node: it creates .venv when missing, installs everything, then lints, type-checks and tests.

# The project's Python: the functions' Lambda runtime (python3.13), and what .venv, the checks and the tests
# run on. The code shipped to Glue 5.x runs on Glue's Python 3.11: the tests compile it with a Python 3.11.
PYTHON_VERSION := 3.13
GLUE_PYTHON_VERSION := 3.11
# $(call find_python,X.Y): the path of a Python X.Y that runs, or nothing. `pythonX.Y` on the PATH first,
# then the newest X.Y.z in pyenv's versions folder: under pyenv, `python3.13` on the PATH is a shim that
# fails unless 3.13 is one of pyenv's selected versions, while the interpreter itself is there.
find_python = $(shell for candidate in python$(1) $$(ls -d "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/$(1).*/bin/python$(1) 2>/dev/null | sort -r -V); do \
	"$$candidate" -c 'import sys; print(sys.executable) if "%d.%d" % sys.version_info[:2] == "$(1)" else sys.exit(1)' 2>/dev/null && break; done)
# `make PYTHON=/path/to/python3.13` names the interpreter; otherwise it is looked for once, when needed.
ifeq ($(origin PYTHON),undefined)
PYTHON = $(eval PYTHON := $(call find_python,$(PYTHON_VERSION)))$(PYTHON)
endif
IS_PYTHON_VERSION := import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PYTHON_VERSION)")
# Stops, naming what to install, when there is no Python 3.13 (as `tools` does for Java and Node).
NEED_PYTHON = [ -n "$(PYTHON)" ] && "$(PYTHON)" -c '$(IS_PYTHON_VERSION)' 2>/dev/null || { \
	echo "make $(MAKECMDGOALS) needs Python $(PYTHON_VERSION), the functions' Lambda runtime: $(if $(PYTHON),$(PYTHON) is not Python $(PYTHON_VERSION),found no python$(PYTHON_VERSION) that runs on the PATH or in pyenv's versions folder). Install it (pyenv install $(PYTHON_VERSION); macOS: brew install python@$(PYTHON_VERSION); or python.org), or name one with make PYTHON=/path/to/python$(PYTHON_VERSION), then run make $(MAKECMDGOALS) again" >&2; exit 1; }
VENV ?= .venv
BIN := $(VENV)/bin
# .venv's Python version, as a file: a .venv made on another Python is made anew (see below).
VENV_PYTHON := $(VENV)/.python-$(PYTHON_VERSION)
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

.PHONY: lock install lint typecheck test unit functional bench demo tools glue-python clean checkov-env checkov dist

# .venv on Python 3.13. A .venv on another Python (a checkout's from before the project moved to 3.13), or
# whose Python no longer runs, is removed and made anew: everything in it is what make installs, and
# packages built for another Python do not load. What depends on this file is reinstalled after it.
$(VENV_PYTHON):
	@$(NEED_PYTHON)
	@if [ -e $(VENV) ] && ! $(BIN)/python -c '$(IS_PYTHON_VERSION)' 2>/dev/null; then \
	  echo "$(VENV) runs $$($(BIN)/python --version 2>/dev/null || echo 'a Python that does not start'), not Python $(PYTHON_VERSION): making it anew" >&2; \
	  rm -rf $(VENV); \
	fi
	@[ -x $(BIN)/python ] || { echo "$(PYTHON) -m venv $(VENV)"; "$(PYTHON)" -m venv $(VENV); }
	@touch $@

# uv installs the same pins as pip, about twice as fast on a fresh machine (94 s against 45 s here).
$(BIN)/uv: $(VENV_PYTHON)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	@touch $@

# --compile-bytecode writes every installed module's .pyc now. Python reads .pyc files even where
# PYTHONDONTWRITEBYTECODE forbids writing them (as on the machines CI runs on), and without them each
# process compiles what it imports from source: aws-cdk-lib alone took 12 s in every `serve`, synth and
# test worker (serve's start: 24 s against 10 s).
$(STAMP): pyproject.toml requirements-lock.txt $(BIN)/uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -c requirements-lock.txt -e ".[infra,pipeline,offline,cli]" --group dev
	@touch $(STAMP)

# The CDK command line pinned in package.json (npx cdk ..., and the infra tests' `cdk synth`).
$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $(NPM_STAMP)

install: $(STAMP) $(NPM_STAMP)

# checkov, pinned, in its own environment; tests/infra/test_checkov.py runs it on the templates the infra
# tests synthesize.
$(CHECKOV_STAMP): Makefile $(BIN)/uv
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

# The code shipped to Glue 5.x is type-checked a second time as Python 3.11, Glue's Python: it catches
# what the compile under 3.11 cannot, such as a standard-library function added later (ruff's per-file
# target version in pyproject.toml names the same files).
GLUE_CODE := longjobs/__init__.py longjobs/pipeline jobs
typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy --python-version $(GLUE_PYTHON_VERSION) $(GLUE_CODE)

# Three workers on two cores: many tests wait on real time (the emulator's queues and workflows), and two
# workers left the cores a third idle (the suite took 592 s against some 640 s). The tests that judge real
# time give it generous bounds (tests/short_settings.py), since CI may share its machine. checkov's
# environment installs beside the installs and checks before them (two jobs), so it adds no wall time of
# its own. Work stealing: a worker left idle takes tests queued for another, so the few long real-time
# tests at the end do not run one after another on one worker.
#
# The type check runs beside the tests, at a lower priority: it is one core's work for minutes (mypy reads
# aws-cdk-lib's types), and the tests spend much of their time waiting on real time (workflows, queues,
# Spark), time it takes up; the tests' processes come first when both want the cores. Its output is shown
# once it ends, and either failing fails the target.
test: tools glue-python
	@$(MAKE) --no-print-directory -j2 --output-sync=target checkov-env lint
	@nice -n 10 $(MAKE) --no-print-directory typecheck > $(VENV)/typecheck.log 2>&1 & checking=$$!; \
	  $(BIN)/pytest -n 3 --dist worksteal; tested=$$?; \
	  wait $$checking; checked=$$?; cat $(VENV)/typecheck.log; \
	  [ $$checked -eq 0 ] || echo "make test: the type check failed (above)" >&2; \
	  [ $$tested -eq 0 ] && [ $$checked -eq 0 ]

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
	$(BIN)/python -m benchmarks.delivery_walk

# Python 3.13 makes .venv; Java runs Spark (the pipeline tests, the demo); Node runs the pinned CDK command
# line that renders the workflow and synthesizes the stack. All are checked before anything is installed.
# The CDK supports Node 22 and 24 (https://docs.aws.amazon.com/cdk/v2/guide/node-versions.html); any other
# version gets a note and goes on, Node 20 included (past its end of life, it still runs this project's CDK).
tools:
	@$(NEED_PYTHON)
	@java -version >/dev/null 2>&1 || { echo "make $(MAKECMDGOALS) needs Java 17 for Spark: install a JDK or JRE 17 (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17), then run make $(MAKECMDGOALS) again" >&2; exit 1; }
	@node --version >/dev/null 2>&1 || { echo "make $(MAKECMDGOALS) needs Node.js for the CDK: install Node 22 or 24 (https://nodejs.org), then run make $(MAKECMDGOALS) again" >&2; exit 1; }
	@major=$$(node --version | sed 's/^v//; s/[.].*//'); case "$$major" in \
	  22|24) ;; \
	  20) echo "note: Node 20 works here, but it is past its end of life (2026-04-30) and the CDK's support for it ended on 2026-10-30; the CDK supports Node 22 and 24 (https://nodejs.org)" >&2 ;; \
	  *) echo "note: Node $$major is not one the CDK supports; it supports Node 22 and 24 (https://nodejs.org)" >&2 ;; \
	esac

# The tests compile the code shipped to Glue 5.x with a Python 3.11, Glue's Python
# (tests/processes/test_python_versions.py): `make test` checks there is one before anything is installed.
glue-python:
	@[ -n "$(call find_python,$(GLUE_PYTHON_VERSION))" ] || { echo "make $(MAKECMDGOALS) needs Python $(GLUE_PYTHON_VERSION) too, Glue 5.x's Python, to check the code shipped to Glue: found no python$(GLUE_PYTHON_VERSION) that runs on the PATH or in pyenv's versions folder. Install it (pyenv install $(GLUE_PYTHON_VERSION); Debian 12: sudo apt-get install python3; macOS: brew install python@$(GLUE_PYTHON_VERSION)), then run make $(MAKECMDGOALS) again" >&2; exit 1; }

# The whole processor offline (moto, local Spark): a mixed scenario, its report and timeline in out/demo.
demo: tools install
	$(BIN)/python -m offline demo --out out/demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis node_modules cdk.out dist
