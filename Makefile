# Developer entry points. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_TIMEOUT ?= 300

.PHONY: venv lint tools broker broker-stop test demo

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

# Java, Maven and Debian's prometheus; installs prometheus when run as root (as CI),
# else fails saying how: the tests that need them must never skip silently.
tools:
	@bash .ci/ensure-tools

# The test session starts (and stops) its own broker; set STREAMREMAT_BOOTSTRAP to use another.
# -rs: a skipped test says why in the summary, never only as an "s".
test: venv tools lint
	$(BIN)/pytest -q -rs --timeout=$(PYTEST_TIMEOUT)

demo: venv
	$(BIN)/streamremat demo
