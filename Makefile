# Everything installs itself: a fresh machine needs only Python 3.11 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest demo bench clean fixtures schemas man sdist

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check dsh_fork tests
	$(BIN)/ruff format --check dsh_fork tests

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest

test: lint typecheck pytest

demo: $(STAMP)
	@bash scripts/demo.sh $(BIN)

bench: $(STAMP)
	$(BIN)/python -m tests.bench.run

bench-large: $(STAMP)
	$(BIN)/python -m tests.bench.run --large

# The JSON Schemas shipped in the package, made from dsh_fork/documents.py (docs/schemas.md).
schemas: $(STAMP)
	$(BIN)/python -m dsh_fork.schemas

fixtures: $(STAMP)
	rm -rf fixtures/example-home
	$(BIN)/dsh-fork fixture fixtures/example-home/sessions --sessions 2 --agents 2 --depth 2 --turns 2 --seed 7

# The man page, from the help (a test holds docs/dsh-fork.1 to it: rerun after a help change).
man: $(STAMP)
	$(BIN)/python -m dsh_fork.cli.manpage > docs/dsh-fork.1

# A source distribution whose tests run once unpacked (MANIFEST.in).
sdist: $(STAMP)
	$(BIN)/python -m build --sdist

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
