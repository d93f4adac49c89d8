# The two set-up commands of the README: `make demo` and `make test`. Each creates .venv when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONSTRAINTS := constraints-dev.txt

.PHONY: demo test test-slow lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml $(BIN)/activate
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(CONSTRAINTS) $(BIN)/activate
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -e ".[dev]"
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/ppl-sparsegp fit svgp --out demo_out

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q

test-slow: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -m slow

lint: $(VENV)/.installed-dev
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) demo_out
