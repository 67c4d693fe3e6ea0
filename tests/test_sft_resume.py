"""A run killed mid-stage and resumed from its last checkpoint ends with the same weights."""

import random

import pytest
import torch

from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.chat import encode_sft_example
from passband.training.checkpoint import load_checkpoint
from passband.training.sft.config import StageConfig
from passband.training.sft.loop import train_stage
from passband.training.sft.packing import SFTExample


class Killed(Exception):
    pass


def _examples(tokenizer, num=30):
    rng = random.Random(0)
    examples = []
    for _ in range(num):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        prompt = f"{a}+{b}=?"
        response = f"{a}+{b}={a + b}. " * rng.randint(1, 3)
        examples.append(SFTExample(*encode_sft_example(tokenizer, prompt, response, max_length=96)))
    return examples


def _stage(activation_checkpointing):
    return StageConfig(
        name="foundation",
        datasets={"math": 1.0},
        max_length=96,
        num_steps=6,
        lr=3e-3,
        warmup_steps=2,
        schedule="cosine",
        batch_tokens=300,
        micro_batch_tokens=192,
        grad_clip=0.5,
        activation_checkpointing=activation_checkpointing,
        checkpoint_every=2,
        seed=5,
    )


@pytest.mark.parametrize("activation_checkpointing", [False, True])
def test_resume_ends_with_identical_weights(tmp_path, activation_checkpointing):
    tokenizer = tiny_tokenizer()
    examples = _examples(tokenizer)
    cfg = _stage(activation_checkpointing)

    full_metrics = {}
    full_model = tiny_llama(seed=0)
    initial = {k: v.clone() for k, v in full_model.state_dict().items()}
    full = train_stage(full_model, tokenizer, examples, cfg, tmp_path / "full",
                       on_metrics=lambda m, s: full_metrics.__setitem__(s, dict(m)))
    assert full.num_steps == 6 and full.last_checkpoint.name == "step_000006"

    def kill_after_3(metrics, step):
        if step == 3:
            raise Killed
    checkpoints = []
    with pytest.raises(Killed):
        train_stage(tiny_llama(seed=0), tokenizer, examples, cfg, tmp_path / "killed",
                    on_metrics=kill_after_3, on_checkpoint=lambda p, s: checkpoints.append((p.name, s)))
    assert checkpoints == [("step_000002", 2)]
    assert sorted(p.name for p in (tmp_path / "killed").iterdir()) == ["step_000002"]  # no partial dirs

    resumed_metrics = {}
    resumed_model = tiny_llama(seed=123)  # different init: the weights must come from the checkpoint
    resumed = train_stage(resumed_model, tokenizer, examples, cfg, tmp_path / "killed",
                          resume_from=tmp_path / "killed" / "step_000002",
                          on_metrics=lambda m, s: resumed_metrics.__setitem__(s, dict(m)))
    assert resumed.num_steps == 6
    assert sorted(resumed_metrics) == [3, 4, 5, 6]
    for step in (3, 4, 5, 6):  # same data, same rates: neither replayed nor skipped
        assert resumed_metrics[step]["num_tokens"] == full_metrics[step]["num_tokens"]
        assert resumed_metrics[step]["lr"] == full_metrics[step]["lr"]
    # CPU kernels are deterministic for identical inputs and shapes, so exact equality holds.
    full_state, resumed_state = full_model.state_dict(), resumed_model.state_dict()
    assert all(torch.equal(full_state[k], resumed_state[k]) for k in full_state)
    assert not torch.equal(full_state["model.embed_tokens.weight"], initial["model.embed_tokens.weight"])
    saved = load_checkpoint(resumed.last_checkpoint)
    assert torch.equal(saved.model_state["model.embed_tokens.weight"], full_state["model.embed_tokens.weight"])
    assert saved.trainer_state["step"] == 6


def test_resume_refuses_other_data(tmp_path):
    tokenizer = tiny_tokenizer()
    examples = _examples(tokenizer)
    cfg = _stage(False).model_copy(update={"num_steps": 2})
    result = train_stage(tiny_llama(), tokenizer, examples, cfg, tmp_path)
    with pytest.raises(ValueError, match="data_fingerprint"):
        train_stage(tiny_llama(), tokenizer, examples[1:], cfg, tmp_path, resume_from=result.last_checkpoint)
