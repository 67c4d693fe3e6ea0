"""A tiny model that ships its own code, as the recipe's Motif does (issue 71): its architecture lives in
the folder's own configuration_twisted.py and modeling_twisted.py, wired through config.json's `auto_map`.

The twist on Llama is real: every MLP gates with a squared ReLU (the Primer activation) instead of SiLU,
so the same weights loaded as plain Llama give other logits. Weights: tests/tiny_chat_model.py's tiny
Llama; tokenizer: its byte-level ChatML tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

from tiny_chat_model import tiny_llama, tiny_tokenizer

CONFIGURATION = '''from transformers import LlamaConfig


class TwistedLlamaConfig(LlamaConfig):
    model_type = "twisted_llama"
'''

MODELING = '''import torch
from transformers import LlamaForCausalLM, LlamaModel

from .configuration_twisted import TwistedLlamaConfig


class SquaredReLU(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x).square()


class TwistedLlamaModel(LlamaModel):
    config_class = TwistedLlamaConfig

    def __init__(self, config):
        super().__init__(config)
        for layer in self.layers:
            layer.mlp.act_fn = SquaredReLU()


class TwistedLlamaForCausalLM(LlamaForCausalLM):
    config_class = TwistedLlamaConfig

    def __init__(self, config):
        super().__init__(config)
        self.model = TwistedLlamaModel(config)
        self.post_init()
'''

CODE_FILES = ["configuration_twisted.py", "modeling_twisted.py"]


def twisted_model(folder: Path, seed: int = 3) -> Path:
    """`folder` holding the custom-code model: tiny Llama weights under the twisted architecture."""
    # head_dim 64: vLLM's CPU attention has no kernel for the tiny Llama's default 16
    tiny_llama(seed=seed, hidden=256, attn="eager").save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    (folder / "configuration_twisted.py").write_text(CONFIGURATION)
    (folder / "modeling_twisted.py").write_text(MODELING)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="twisted_llama", architectures=["TwistedLlamaForCausalLM"], auto_map={
        "AutoConfig": "configuration_twisted.TwistedLlamaConfig",
        "AutoModel": "modeling_twisted.TwistedLlamaModel",
        "AutoModelForCausalLM": "modeling_twisted.TwistedLlamaForCausalLM",
    })
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder
