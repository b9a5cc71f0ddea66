# Two commands for a new user: `make run` and `make test`. Both create the
# virtual environment and install what they need; a second run skips the
# install while pyproject.toml is unchanged (the stamp holds its hash).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
RUN_STAMP := $(VENV)/.installed-run-$(HASH)
DEV_STAMP := $(VENV)/.installed-dev-$(HASH)

.PHONY: run test check lint format typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUN_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	rm -f $(VENV)/.installed-run-*
	touch $@

$(DEV_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-run-* $(VENV)/.installed-dev-*
	touch $@ $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/gateway run

test: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

check: lint typecheck

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(DEV_STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
