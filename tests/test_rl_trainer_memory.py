"""The trainer's memory options change how the update is computed, not what it computes:
activation checkpointing (recompute in backward, dropout kept at 0 in train mode) and the SDPA
attention kernel give the eager, stored-activation update."""

import torch

from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.trainer import open_trainer
from passband.training.rl.update import rl_update
from test_rl_precision import _batch
from tiny_chat_model import tiny_llama, tiny_tokenizer


def _saved_tiny(tmp_path):
    model = tiny_llama(num_layers=3)
    model.config.attention_dropout = 0.3  # would make train() nondeterministic if left on
    model.save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    return tmp_path


def _update(model_dir, **options):
    algo = RLAlgoConfig(precision="fp32", micro_batch_size=3, lr=1e-3, **options)
    trainer = open_trainer(model_dir, ["math"], algo)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    batch = _batch(trainer.model)
    # plain SGD: the update is the gradient itself (AdamW's first step is its sign, too coarse to compare)
    optimizer = torch.optim.SGD(trainer.model.parameters(), lr=1.0)
    metrics = rl_update(trainer.model, None, optimizer, batch, algo)
    delta = torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(trainer.model.parameters(), before)])
    return trainer, metrics, delta


def test_activation_checkpointing_and_sdpa_give_the_same_update(tmp_path):
    model_dir = _saved_tiny(tmp_path)
    _, plain, d_plain = _update(model_dir, attention="eager")
    trainer, checkpointed, d_ckpt = _update(model_dir, attention="eager", activation_checkpointing=True)
    _, sdpa, d_sdpa = _update(model_dir, attention="sdpa", activation_checkpointing=True)
    # checkpointing really is on, in train mode, with every dropout off
    assert trainer.model.is_gradient_checkpointing and trainer.model.training
    assert all(layer.self_attn.attention_dropout == 0.0 for layer in trainer.model.model.layers)
    assert d_plain.abs().max() > 1e-4  # a real update
    # recomputation repeats the same fp32 ops: the same update to float noise
    assert torch.allclose(d_ckpt, d_plain, rtol=1e-4, atol=1e-7)
    assert checkpointed["ratio_max"] == 1.0 and checkpointed["vllm_kl"] == plain["vllm_kl"]
    # SDPA sums in another order than eager softmax(QK^T)V: equal to ~1e-6
    assert torch.allclose(d_sdpa, d_plain, rtol=1e-3, atol=1e-6)
    assert abs(sdpa["entropy"] - plain["entropy"]) < 1e-5
