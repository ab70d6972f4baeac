# Developer entry points. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_TIMEOUT ?= 300

.PHONY: venv lint broker broker-stop test demo

venv: $(STAMP)

# Re-installs only when the dependency declarations change.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "error: $(PYTHON) is older than 3.11; run e.g. 'make venv PYTHON=python3.11'" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "error: $(VENV) uses Python < 3.11; remove it and rerun 'make venv'" >&2; exit 1; }
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

lint: venv
	$(BIN)/ruff check streamremat operators tests bench
	$(BIN)/mypy

broker: venv
	$(BIN)/streamremat broker start

broker-stop: venv
	$(BIN)/streamremat broker stop

# The test session starts (and stops) its own broker; set STREAMREMAT_BOOTSTRAP to use another.
test: venv lint
	$(BIN)/pytest -q --timeout=$(PYTEST_TIMEOUT)

demo: venv
	$(BIN)/streamremat demo
