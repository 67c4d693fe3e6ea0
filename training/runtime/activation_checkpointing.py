"""Activation checkpointing for both trainers (SFT's stages and the RL update): none, selective, every layer.

- "none": autograd keeps every tensor the backward needs, for the whole micro-batch.
- "every-layer": each decoder layer keeps only its input; backward runs the layer's forward again
  (transformers' gradient checkpointing, non-reentrant). About one more forward of compute.
- "selective": per op inside each layer, as the recipe does it (docs/recipe.md section 11, torchtitan's
  `_apply_ac` with its op list): the outputs of the matmuls and of the attention kernel are kept (the
  work of a layer: recomputing them would cost most of a forward again), everything else (RMSNorm,
  RoPE, SiLU, the element-wise products and the residual adds) is recomputed in backward from them,
  through torch's selective checkpoint API (`create_selective_checkpoint_contexts` with a policy).
  What stays per token and layer, fp32: q, k, v, the attention output and its log-sum-exp, o_proj,
  gate, up and down (5 h + 2 kv + 2 I + heads values with the layer input) instead of none's
  8 h + 4 I + 2 kv + heads + 2 (training/memory_model.py counts both; tests/test_activation_checkpointing.py
  measures them). Gradients are the same as none's: the recomputed ops are deterministic functions of
  what was kept.

The setting was a bool before it had three values: `true` still reads as "every-layer" and `false`
as "none", so presets and `--set ...activation_checkpointing=true` keep working.

The policy sees aten ops, not modules, so it holds for any decoder the model's own code builds from
linear layers and SDPA (a model with its own attention kernel keeps that kernel's output only if it is one
of the ops below; otherwise it is recomputed, which costs time, not correctness).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator

Checkpointing = Literal["none", "selective", "every-layer"]
"""What a trainer's `activation_checkpointing` resolves to."""


def _from_bool(value: Any) -> Any:
    # the setting's two values before selective existed, still read as they were
    if isinstance(value, bool):
        return "every-layer" if value else "none"
    return value


CheckpointingSetting = Annotated[Checkpointing, BeforeValidator(_from_bool)]
"""The config field's type: one of `Checkpointing`, or a bool (true: every-layer, false: none)."""


@functools.cache
def saved_ops() -> frozenset[Any]:
    """The aten ops whose outputs selective checkpointing keeps: the matmuls (a linear layer is mm or
    addmm once flattened to 2-D; eager attention's products are bmm) and the attention kernels (their
    output and log-sum-exp; on the CPU SDPA runs `_scaled_dot_product_flash_attention_for_cpu`)."""
    import torch

    aten = torch.ops.aten
    return frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
                      aten._scaled_dot_product_flash_attention.default,
                      aten._scaled_dot_product_efficient_attention.default,
                      aten._scaled_dot_product_cudnn_attention.default,
                      aten._scaled_dot_product_flash_attention_for_cpu.default})


def _policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in saved_ops() else CheckpointPolicy.PREFER_RECOMPUTE


def selective_contexts() -> tuple[Any, Any]:
    """A fresh pair of contexts for one checkpointed call (checkpoint's `context_fn`): the forward's
    caches the kept outputs, the recompute's serves them instead of running those ops again."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(_policy)


def enable_checkpointing(model: Any, setting: Checkpointing, preserve_rng_state: bool = True) -> None:
    """Checkpoint every decoder layer of `model` (a transformers causal LM, peft's included) as `setting`
    says; "none" leaves it as it is. Call it before FSDP2 shards the model (the layers' own `__call__`
    runs the checkpoint, FSDP2's hooks inside it, as with every-layer). `preserve_rng_state`: torch's
    default; the RL trainer turns it off (training/rl/trainer.py says why)."""
    if setting == "none":
        return
    kwargs: dict[str, Any] = {"use_reentrant": False, "preserve_rng_state": preserve_rng_state}
    if setting == "selective":
        kwargs["context_fn"] = selective_contexts
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
