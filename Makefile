# The two set-up commands of the README: `make demo` and `make test`. Each creates .venv when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONSTRAINTS := constraints-dev.txt
# pytest-xdist workers, one per core this process may use.
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 1)

.PHONY: demo test test-slow test-gpu docs lint clean

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
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=0 --durations-min=1.0

test-slow: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m slow --durations=0 --durations-min=1.0

# The suite on an accelerator: jax on GPU_PLATFORM (install the `cuda` extra first: .venv/bin/pip install -e ".[cuda]"),
# one pytest worker for the one device. `make test-gpu GPU_PLATFORM=cpu TEST_ARGS=tests/infer` runs the same path here.
GPU_PLATFORM ?= cuda
TEST_ARGS ?=
test-gpu: $(VENV)/.installed-dev
	JAX_PLATFORMS=$(GPU_PLATFORM) $(BIN)/python -m pytest -q -p no:xdist $(TEST_ARGS)

docs: $(VENV)/.installed-dev
	$(BIN)/python docs/build.py --out docs/_build

lint: $(VENV)/.installed-dev
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) demo_out docs/_build
