# Developer entry points. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_TIMEOUT ?= 300
# The optional native fast path (native/, Rust): built where cargo is, else the
# package's pure-Python fast path runs (streamremat/core/fastpath.py).
CARGO  ?= $(shell command -v cargo 2>/dev/null || { test -x "$$HOME/.cargo/bin/cargo" && echo "$$HOME/.cargo/bin/cargo"; })
NATIVE := $(VENV)/.native
NATIVE_SRC := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)

.PHONY: venv lint tools broker broker-stop test demo

venv: $(STAMP) $(NATIVE)

# Re-installs only when the dependency declarations change.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "error: $(PYTHON) is older than 3.11; run e.g. 'make venv PYTHON=python3.11'" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "error: $(VENV) uses Python < 3.11; remove it and rerun 'make venv'" >&2; exit 1; }
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# Rebuilt only when native/ changes (cargo's target dir, native/target, is kept).
# Without cargo, or when the build fails, any older build is uninstalled: never a stale module.
$(NATIVE): $(STAMP) $(NATIVE_SRC)
	@if [ -z "$(CARGO)" ]; then \
	  $(BIN)/python -m pip uninstall -q -y streamremat-native > /dev/null 2>&1; \
	  echo "native: no Rust toolchain (cargo) found: streamremat runs its pure-Python fast path"; \
	elif PATH="$(dir $(CARGO)):$$PATH" VIRTUAL_ENV="$(abspath $(VENV))" \
	    $(BIN)/maturin develop --release --locked -m native/Cargo.toml > $(VENV)/native-build.log 2>&1; then \
	  echo "native: streamremat_native built and installed (the native fast path)"; touch $@; \
	else \
	  $(BIN)/python -m pip uninstall -q -y streamremat-native > /dev/null 2>&1; \
	  echo "native: building streamremat_native failed (see $(VENV)/native-build.log): streamremat runs its pure-Python fast path"; \
	fi

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
# Where cargo is, the native module must have built: tests/unit/test_native.py fails if not.
test: venv tools lint
	STREAMREMAT_REQUIRE_NATIVE=$(if $(CARGO),1,0) $(BIN)/pytest -q -rs --timeout=$(PYTEST_TIMEOUT)

demo: venv
	$(BIN)/streamremat demo
