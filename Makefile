# r2s2r — every target a user needs; `make demo` and `make test` set everything up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.r2s2r-installed
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl

.PHONY: setup demo test test-slow bench lint format clean

setup: $(STAMP)

# Re-runs only when the project's dependency list changes.
$(STAMP): pyproject.toml
	@bash scripts/ensure_system_deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# openpi's robot-side client, which the policy server's tests drive: it pins numpy < 2,
	# which the rest of the stack outgrew, and its websocket client needs only packages
	# already installed (msgpack, websockets), so it goes in without its pins.
	$(BIN)/python -m pip install --quiet --no-deps "openpi-client==0.1.2"
	@touch $(STAMP)
	@echo "r2s2r installed: $(BIN)/r2s2r"

demo: $(STAMP)
	$(BIN)/r2s2r sim demo --out outputs/demo

# The tests run on one pytest-xdist worker per core (at most 4) and print the ten slowest.
# `make test` skips the tests marked slow and keeps each test module on one worker
# (--dist loadscope, in file order: by test count the grounding pipeline's module, whose
# fixture takes two minutes, would start last), so a module fixture is made once;
# `make test-slow` runs only the slow tests, spread test by test (--dist load).
# pytest-timeout stops a test after 450 s, a slow one after 1200 s (pyproject.toml,
# tests/conftest.py). CI (.ci/run) runs lint, test, then test-slow.
PYTEST := $(BIN)/python -m pytest -q -n auto --maxprocesses 4 --durations=10

test: $(STAMP)
	$(PYTEST) --dist loadscope --no-loadscope-reorder

test-slow: $(STAMP)
	$(PYTEST) --dist load -m slow

bench: $(STAMP)
	$(BIN)/r2s2r sim bench

lint: $(STAMP)
	$(BIN)/ruff check source tests
	$(BIN)/ruff format --check source tests
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format source tests
	$(BIN)/ruff check --fix source tests

clean:
	rm -rf $(VENV) outputs .pytest_cache .mypy_cache .ruff_cache
