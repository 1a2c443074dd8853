# voxserve: two entry points for a fresh machine.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test install lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==26.3

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,peers]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/voxserve serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check voxserve tests
	$(BIN)/mypy voxserve

clean:
	rm -rf $(VENV) build *.egg-info
