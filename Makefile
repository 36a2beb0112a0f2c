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
	@touch $(STAMP)
	@echo "r2s2r installed: $(BIN)/r2s2r"

demo: $(STAMP)
	$(BIN)/r2s2r sim demo --out outputs/demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

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
