"""Which weights Muon trains: the 2-D hidden matrices. Everything else goes to AdamW.

Muon is for the hidden layers' matrices (Keller Jordan; Moonlight): the attention projections (q, k, v, o) and
the MLP's (gate, up, down). Embeddings and the LM head are lookups/readouts whose rows see very different
gradient scales, and norms and biases are vectors: AdamW trains them (a tied head is the embedding itself).
The rule reads a parameter's name and shape only, so the memory model applies it to shapes alone
(training/optim/memory.py), and names are a model's own: `model.embed_tokens.weight`, `lm_head.weight`, and
under the trainer's loss wrapper `lm.model.embed_tokens.weight`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the memory model reads uses_muon while `passband config` prints, which must not load torch
    import torch

NOT_HIDDEN = ("embed", "lm_head", "wte", "wpe")
"""Name parts of embeddings and LM heads (Llama/Qwen/Mistral: embed_tokens, lm_head; GPT-2: wte, wpe)."""


def uses_muon(name: str, shape: tuple[int, ...]) -> bool:
    """Whether the parameter `name` of `shape` is a hidden matrix Muon trains: 2-D and not an embedding or head."""
    return len(shape) == 2 and not any(part in name for part in NOT_HIDDEN)


def split_parameters(model: torch.nn.Module) -> tuple[list[tuple[str, torch.nn.Parameter]], list[tuple[str, torch.nn.Parameter]]]:
    """(Muon's, AdamW's) trainable (name, parameter) pairs of `model`, in `named_parameters` order (a tied
    head once, under the embedding's name). Refuses a model whose embedding or head the name rule misses:
    Muon on a vocabulary matrix would be silently wrong."""
    import torch

    readouts = {id(module.weight) for module in model.modules() if isinstance(module, torch.nn.Embedding)}
    heads = [module for module in model.modules() if hasattr(module, "get_output_embeddings")]
    readouts |= {id(head.get_output_embeddings().weight) for head in heads if head.get_output_embeddings() is not None}
    muon, adamw = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if uses_muon(name, tuple(parameter.shape)) and id(parameter) in readouts:
            raise ValueError(f"{name} is an embedding or LM head but its name has none of {NOT_HIDDEN}: add its "
                             "name part to training/optim/groups.py NOT_HIDDEN so that AdamW trains it")
        (muon if uses_muon(name, tuple(parameter.shape)) else adamw).append((name, parameter))
    return muon, adamw
