"""A model on torchrun ranks without a full copy on every rank (torchtitan's meta-device init).

Every rank builds the model's architecture with its parameters on the `meta` device (no memory)
and FSDP2 shards it; then `fill_weights` gives each rank its shards: from a model folder or a
one-process checkpoint, rank 0 alone reads the safetensors and broadcasts one tensor at a time,
each rank keeping its shard as the parameter itself (`set_model_state_dict`'s broadcast_from_rank0,
assigning over the meta shards: no second copy); from a sharded checkpoint each rank reads its own
(training/runtime/checkpoint_shards.py). The most a rank other than 0 holds beyond its shards is one full
tensor, while it is broadcast. Build the optimizer after: the broadcast puts new parameters in place.

Buffers are not in a checkpoint (the rotary frequencies are computed from the config), so they
are built for real, on the host.
"""

from __future__ import annotations

from pathlib import Path

import torch


def empty_causal_lm(model_dir: Path, trust_remote_code: bool = False) -> torch.nn.Module:
    """`load_causal_lm(model_dir)`'s model (fp32, eager attention, the same generation config)
    with every parameter on `meta`; its buffers are real. `trust_remote_code`: build the model's own
    architecture from its code files (EngineConfig.trust_remote_code)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager",
                                                 trust_remote_code=trust_remote_code)
    model.tie_weights()  # accelerate's parameter hook gives a tied head a parameter of its own: tie it again
    if (Path(model_dir) / "generation_config.json").is_file():  # what from_pretrained reads (and a checkpoint writes back)
        model.generation_config = GenerationConfig.from_pretrained(str(model_dir))
    return model.eval()  # from_pretrained's mode


def on_meta(model: torch.nn.Module) -> bool:
    """Whether `model`'s parameters are still to be filled (built by `empty_causal_lm`)."""
    return any(parameter.is_meta for parameter in model.parameters())


def materialize(model: torch.nn.Module, device: torch.device) -> None:
    """Allocate `model`'s parameters (after fully_shard: each rank's shards) on `device`, their
    values undefined until loaded in place; the buffers keep the values they were built with."""
    buffers = {name: buffer.to(device) for name, buffer in model.named_buffers()}
    model.to_empty(device=device)
    with torch.no_grad():
        for name, buffer in buffers.items():
            model.get_buffer(name).copy_(buffer)


def fill_weights(model: torch.nn.Module, path: Path, device: torch.device) -> None:
    """Each rank's shards of the sharded, meta-built `model` (a transformers model) from `path`: a
    checkpoint the ranks wrote (each rank reads its own shards), else the *.safetensors of a model
    folder or one-process checkpoint (rank 0 reads them and broadcasts). A collective."""
    from safetensors import safe_open

    from passband.training.checkpoint import tied_parameter_aliases, weight_files
    from passband.training.runtime.checkpoint_shards import is_sharded, load_sharded_weights
    from passband.training.runtime.distributed import rank

    if is_sharded(path):
        materialize(model, device)
        load_sharded_weights(path, model)
        return
    # One tensor at a time: rank 0 reads it (the file opened for it alone, so its pages leave the
    # resident set with it) and broadcasts it. Every rank reads the files' headers for the order.
    tied = tied_parameter_aliases(model)
    for weight_file in weight_files(path):
        with safe_open(weight_file, framework="pt") as header:
            names = list(header.keys())
        for name in names:
            full = {}
            if rank() == 0:
                with safe_open(weight_file, framework="pt") as weights:
                    full[name] = weights.get_tensor(name)
            broadcast_state(model, full)
    if tied:  # assigning over the meta parameters gave the shared one to its first name only
        model.tie_weights()
    if on_meta(model):
        raise ValueError(f"{path}'s weights leave parameters of the model unfilled: "
                         f"{sorted(name for name, p in model.named_parameters() if p.is_meta)}")


def broadcast_state(model: torch.nn.Module, full_state: dict[str, torch.Tensor]) -> None:
    """Rank 0's `full_state` (the others pass {}: rank 0 says which tensors) into the sharded
    `model`, each rank keeping its shards; rank 0's copy is freed. A key the model lacks is an
    error naming it. A tied parameter (lm_head tied to the embeddings) is filled through its first
    name, as a checkpoint writes it once."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    result = set_model_state_dict(model, full_state, options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True, strict=False))
    full_state.clear()  # what set_model_state_dict left in it
    if result.unexpected_keys:
        raise ValueError(f"the checkpoint does not match the model: unexpected {sorted(result.unexpected_keys)}")
