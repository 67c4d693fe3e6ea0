"""LoRA adapters injected into a causal LM in place (peft), the model kept as the plain HF model.

The trainers hold the same `LlamaForCausalLM`-like module with or without adapters: peft's
`inject_adapter_in_model` swaps each targeted `nn.Linear` for a LoRA layer around it and freezes
everything else, so `model.model`, `model.lm_head`, FSDP units and every log-prob path stay as
they are. What the adapters change is reached through three functions here:
- `adapters_disabled(model)`: the frozen base itself, which is the reference policy (no second copy);
- `merged_state(model)`: the HF state dict of W + (alpha/r) B A, what the engine and MLflow load;
- `adapter_state(model)` / `load_adapter_state`: the adapters alone, peft's file layout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from passband.training.lora.settings import LoraConfig

ADAPTER_NAME = "default"
"""peft's name of the one adapter we train (it appears in parameter names: lora_A.default.weight)."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."
"""How peft's saved adapters name the model's modules (a PeftModel wraps a LoraModel wraps the LM):
what vLLM's LoRA loader and `PeftModel.from_pretrained` expect in adapter_model.safetensors."""


def attach_adapters(model: torch.nn.Module, cfg: LoraConfig, seed: int) -> torch.nn.Module:
    """`model` with fresh LoRA adapters on `cfg.target_modules`, in place, its base frozen (requires_grad
    False): only the adapters train. A is drawn from a generator seeded with `seed` without touching the
    process's RNG (which the run's other draws continue from); B is zero, so the logits equal the base's."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import inject_adapter_in_model

    adapter_targets(model, cfg.target_modules)  # refuses, in one line, targets the architecture lacks
    peft_config = PeftLoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                                 target_modules=cfg.target_modules, bias="none")
    devices = [model.get_input_embeddings().weight.device] if model.get_input_embeddings().weight.is_cuda else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        inject_adapter_in_model(peft_config, model, adapter_name=ADAPTER_NAME)
    return model


def adapter_targets(model: torch.nn.Module, target_modules: list[str] | str) -> list[str]:
    """The names of the modules `target_modules` adapts in `model`, as peft chooses them, sorted.

    How targets are chosen, for any architecture, the model's own code included: peft adapts linear layers
    (torch's Linear, transformers' Conv1D) found by type, so 'all-linear' is every one of them but the LM head
    (the model's output embeddings), and a list names module suffixes ('q_proj' matches
    'model.layers.0.self_attn.q_proj'). A custom architecture built of Linear layers is covered whatever its
    names; one whose projections are other modules, or a suffix that matches no linear layer, is refused
    here in one line naming the model's linear suffixes (peft would adapt the others silently, or fail
    with a message of its own)."""
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings()  # a transformers model (the trainers' only kind); None: no head
    linear = sorted(name for name, module in model.named_modules()
                    if isinstance(module, (torch.nn.Linear, Conv1D)) and module is not head)
    architecture = type(model).__name__
    suffixes = sorted({name.rsplit(".", 1)[-1] for name in linear})
    if target_modules == "all-linear":
        if not linear:
            raise ValueError(f"lora.target_modules: all-linear finds no linear layer in {architecture} (its code builds "
                             "its projections from other modules): name the modules to adapt in lora.target_modules")
        return linear
    unmatched = [key for key in target_modules if not any(name == key or name.endswith(f".{key}") for name in linear)]
    if unmatched:
        raise ValueError(f"lora.target_modules {unmatched} match no linear layer of {architecture}, whose linear "
                         f"layers end in {suffixes or 'nothing'}: name those, or 'all-linear'")
    return [name for name in linear if any(name == key or name.endswith(f".{key}") for key in target_modules)]


def base_weights_in_bf16(model: torch.nn.Module) -> int:
    """Store the frozen weight of every adapted linear layer in bf16, in place; how many parameters moved.

    For a trainer running under bf16 autocast only (training/runtime/precision.py): autocast casts each
    matmul's weight to bf16 anyway, so a weight already in bf16 gives the same products bit for bit,
    and the frozen base, most of a LoRA trainer's memory, takes half of it (a 7.6B base: 14.2 GiB
    against 28.4). Biases, norms, embeddings and the LM head stay fp32 (autocast leaves the ops that
    read them in fp32, or they are not adapted); merged exports upcast (`merged_state`)."""
    moved = 0
    for layer in _lora_layers(model).values():
        weight = layer.get_base_layer().weight
        weight.data = weight.data.to(torch.bfloat16)
        moved += weight.numel()
    return moved


def is_adapted(model: torch.nn.Module) -> bool:
    """Whether `model` carries LoRA adapters (peft's injection leaves its `peft_config` on the model; asking
    costs no peft import, so a run without adapters never loads peft)."""
    return hasattr(model, "peft_config")


@contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`model` with its adapters off for the block: the frozen base, i.e. the reference policy. A model
    without adapters is yielded as it is (the reference is then a model of its own)."""
    if not is_adapted(model):
        yield model
        return
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield model
    finally:  # not defensive: the adapters must come back on even when the block raised
        for layer in layers:
            layer.enable_adapters(True)


def _lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def merged_state(model: torch.nn.Module) -> dict[str, Tensor]:
    """The HF state dict of `model` with every adapter merged: `<layer>.weight` = W + (alpha/r) B A (fp32, on
    the model's device), no `lora_*` entries, every other tensor the model's own (tied ones still shared).
    A model without adapters: its own state dict."""
    if not is_adapted(model):
        return model.state_dict()
    layers = _lora_layers(model)
    merged: dict[str, Tensor] = {}
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            continue
        owner, _, leaf = name.rpartition(".base_layer.")
        if owner in layers and leaf == "weight":
            delta = layers[owner].get_delta_weight(ADAPTER_NAME)
            merged[f"{owner}.weight"] = (tensor.float() + delta.float()).detach()
        elif owner in layers:
            merged[f"{owner}.{leaf}"] = tensor
        else:
            merged[name] = tensor
    return merged


def adapter_checkpoint(model: torch.nn.Module, base_model: str) -> dict[str, Any]:
    """`save_checkpoint`'s keyword arguments for `model`: none for a plain model; with adapters, the merged
    weights as the checkpoint's model (what engines, evaluation and the registry load, as from any
    checkpoint) and the adapters in its `adapter/` folder (what a resumed run trains on)."""
    from passband.training.checkpoint import ADAPTER_FOLDER

    if not is_adapted(model):
        return {}
    return {"model_state": merged_state(model),
            "write_extra": lambda partial: write_adapter(model, partial / ADAPTER_FOLDER, base_model)}


def adapter_state(model: torch.nn.Module) -> dict[str, Tensor]:
    """The adapters' tensors under peft's saved names (`base_model.model.<layer>.lora_A.weight`)."""
    from peft import get_peft_model_state_dict

    return {PEFT_PREFIX + name: tensor.detach() for name, tensor in get_peft_model_state_dict(model).items()}


def load_adapter_state(model: torch.nn.Module, state: dict[str, Tensor]) -> None:
    """Copy adapters saved by `adapter_state` into `model` (adapted with the same settings); a missing or
    extra adapter tensor is an error naming it."""
    from peft import set_peft_model_state_dict

    expected = set(adapter_state(model))
    if set(state) != expected:
        raise ValueError(f"adapter checkpoint does not match the model's adapters: missing {sorted(expected - set(state))[:3]}, "
                         f"unexpected {sorted(set(state) - expected)[:3]}")
    result = set_peft_model_state_dict(model, {name.removeprefix(PEFT_PREFIX): t for name, t in state.items()})
    if result.unexpected_keys:
        raise ValueError(f"adapter checkpoint: unexpected {sorted(result.unexpected_keys)[:3]}")


def write_adapter(model: torch.nn.Module, out_dir: Path, base_model: str) -> dict[str, int]:
    """peft's adapter layout in `out_dir` (adapter_model.safetensors in fp32, adapter_config.json naming
    `base_model` and the resolved target modules): loadable by `PeftModel.from_pretrained` and by vLLM's
    LoRARequest. {file name: bytes}."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.float().cpu().contiguous() for name, tensor in adapter_state(model).items()}
    save_file(tensors, str(out_dir / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    config = model.peft_config[ADAPTER_NAME].to_dict()
    config["target_modules"] = sorted(config["target_modules"])  # peft resolved 'all-linear' to names; a set is not JSON
    config["base_model_name_or_path"] = base_model
    (out_dir / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True, default=str))
    return {name: (out_dir / name).stat().st_size for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG)}


def read_adapter(adapter_dir: Path) -> dict[str, Tensor]:
    """The adapter tensors `write_adapter` wrote in `adapter_dir`, as fp32."""
    from safetensors.torch import load_file

    return {name: tensor.float() for name, tensor in load_file(adapter_dir / ADAPTER_WEIGHTS).items()}
