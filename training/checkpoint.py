"""Training checkpoints in a local directory: everything needed to continue bit-for-bit.

Layout of one checkpoint directory:
  model.safetensors (+ config.json, generation_config.json)  save_pretrained, loadable by HF and vLLM
  tokenizer files                                             tokenizer.save_pretrained
  optimizer.pt          optimizer.state_dict() (AdamW moments and step counts)
  rng.pt                torch / python / numpy (and CUDA when present) RNG states
  trainer_state.json    step, data cursor (epoch, cursor), stage name, seed, data fingerprint
  adapter/              with LoRA only: the adapters in peft's layout (training/lora/adapters.py);
                        the model files above then hold the merged weights
The learning-rate schedule is a pure function of the step (training/runtime/schedule.py), so the step
is the scheduler state. The directory is written under a temporary name and renamed when complete,
so a crash never leaves a half-written checkpoint under the final name; committing it to the
artifact store (manifest last) is the tasks layer's job. Torchrun ranks write the same directory with
the weights and AdamW state sharded instead of optimizer.pt (training/runtime/checkpoint_shards.py).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

ADAPTER_FOLDER = "adapter"
"""The checkpoint's sub-folder of LoRA adapters (not read by `load_checkpoint`: its glob is one level)."""


@dataclass
class LoadedCheckpoint:
    """The contents of a checkpoint directory, not yet applied to any model or optimizer."""

    path: Path
    model_state: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]
    rng_state: dict[str, Any]
    trainer_state: dict[str, Any]


def capture_rng_state() -> dict[str, Any]:
    """RNG states as tensors and plain Python values (loadable with torch.load(weights_only=True))."""
    bit_generator, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "bit_generator": bit_generator,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": pos,
            "has_gauss": has_gauss,
            "cached_gaussian": cached_gaussian,
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng_state`."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["bit_generator"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["pos"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    if "cuda" in state:
        restore_cuda_rng(state["cuda"])


def restore_cuda_rng(states: list[torch.Tensor]) -> None:
    """Device i's generator from `states[i]`, for the devices visible now: a checkpoint saved where 8
    GPUs were visible resumes on 2 (or none) with the first 2 restored. torch's `set_rng_state_all`
    indexes `default_generators[i]` past the device count (IndexError on every rank); a resume at
    another rank count cannot continue the others' streams anyway."""
    for index, state in enumerate(states[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(state, index)


def save_checkpoint(
    out_dir: Path,
    name: str,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    *,
    model_state: dict[str, torch.Tensor] | None = None,
    optimizer_state: dict[str, Any] | None = None,
    write_extra: Callable[[Path], object] | None = None,
) -> Path:
    """Write checkpoint `out_dir/name` (replacing one of that name) and return its path.

    model_state / optimizer_state replace the model's and optimizer's own state. One process
    writes this layout; torchrun ranks write theirs with training/runtime/checkpoint_shards.py.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / name
    partial = out_dir / f".{name}.partial"
    if partial.exists():
        shutil.rmtree(partial)
    model.save_pretrained(partial, state_dict=model_state)
    tokenizer.save_pretrained(partial)
    torch.save(optimizer.state_dict() if optimizer_state is None else optimizer_state, partial / "optimizer.pt")
    torch.save(capture_rng_state(), partial / "rng.pt")
    (partial / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2, sort_keys=True))
    if write_extra is not None:
        write_extra(partial)
    if final.exists():
        shutil.rmtree(final)
    os.replace(partial, final)
    return final


def weight_files(path: Path) -> list[Path]:
    """A checkpoint directory's *.safetensors files."""
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{path} has no *.safetensors weights; not a checkpoint")
    return files


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint directory (its *.safetensors, on the CPU)."""
    model_state: dict[str, torch.Tensor] = {}
    for weight_file in weight_files(path):
        model_state.update(load_file(weight_file))
    return model_state


def read_trainer_state(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer_state.json (either layout)."""
    return json.loads((path / "trainer_state.json").read_text())


def load_checkpoint(path: Path) -> LoadedCheckpoint:
    """Read a checkpoint directory written by `save_checkpoint` in one process (one written by
    torchrun ranks holds no optimizer.pt: training/runtime/checkpoint_shards.py restores either)."""
    return LoadedCheckpoint(
        path=path,
        model_state=read_weights(path),
        # map_location: a checkpoint saved on a GPU loads on a host without one
        optimizer_state=torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True),
        rng_state=torch.load(path / "rng.pt", map_location="cpu", weights_only=True),
        trainer_state=read_trainer_state(path),
    )


def tied_parameter_aliases(model: torch.nn.Module) -> set[str]:
    """Names of parameters that are another parameter under a second name (lm_head.weight when
    tied to the embeddings): save_pretrained writes the shared tensor once, under the first name."""
    all_names = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    return all_names - {name for name, _ in model.named_parameters()}


def load_model_weights(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` into `model`. Keys may be missing only for tied parameters (lm_head tied to
    the embeddings is saved once); any other mismatch is an error naming the keys."""
    result = model.load_state_dict(state, strict=False)
    missing = set(result.missing_keys) - tied_parameter_aliases(model)
    if missing or result.unexpected_keys:
        raise ValueError(
            f"checkpoint does not match the model: missing {sorted(missing)}, unexpected {sorted(result.unexpected_keys)}"
        )
