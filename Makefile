# voxserve: two entry points for a fresh machine.
#   make serve  -> .venv with the runtime dependencies, then the server on the bundled models
#   make test   -> .venv with the test extras too, then lint, types and the whole test suite
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
CHROMIUM := /usr/bin/chromium
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test install lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==26.3

$(RUNTIME_STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e .
	touch $@

$(TEST_STAMP): $(RUNTIME_STAMP) | $(CHROMIUM)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,peers,ray]'
	touch $@

# tests/test_playground.py drives Debian's chromium through Playwright, which cannot
# download a browser of its own here. Installed only when missing; sudo only if not root.
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then sudo=; \
	elif command -v sudo >/dev/null 2>&1; then sudo=sudo; \
	else echo "$(CHROMIUM) is missing: install the Debian packages chromium and chromium-driver as root" >&2; exit 1; fi; \
	set -x; $$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver

install: $(RUNTIME_STAMP)

serve: $(RUNTIME_STAMP)
	$(BIN)/voxserve serve --host $(HOST) --port $(PORT)

lint: $(TEST_STAMP)
	$(BIN)/ruff check voxserve tests
	$(BIN)/mypy voxserve tests

test: lint
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build *.egg-info
