"""A reward model (training/judge/reward_model.py) scoring rollouts through score_groups: a tiny
random Llama sequence classifier (num_labels=1) built here; each pair's reward is sigmoid of the
logit the model gives that pair alone, unpadded, whatever the batch it was scored in."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from passband.curation.catalog import VerifierSettings
from passband.curation.catalog.reward_model import RewardModelConfig
from passband.training.judge.reward_model import pair_text
from passband.training.judge.score import score_groups
from tiny_chat_model import PAD, VOCAB_SIZE, tiny_tokenizer

PROMPTS = ["Say hi.", "Name a colour.", "Count to three."]
COMPLETIONS = [["hi", "Hello there, friend."], ["red", "It is a deep shade of blue."], ["1 2 3", "one"]]


def build_reward_model(path: Path) -> Path:
    """A random tiny Llama sequence classifier with one label and the tiny tokenizer, saved at `path`."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, num_labels=1, pad_token_id=PAD)
    LlamaForSequenceClassification(config).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_reward_model(tmp_path_factory.mktemp("reward_model"))


def alone(path: Path, prompt: str, completion: str) -> float:
    """The pair's reward by hand: its tokens alone (no padding), the logit, the sigmoid."""
    tokenizer = tiny_tokenizer()
    model = LlamaForSequenceClassification.from_pretrained(path).eval()
    ids = tokenizer(pair_text(tokenizer, prompt, completion), return_tensors="pt", add_special_tokens=False).input_ids
    with torch.inference_mode():
        return torch.sigmoid(model(input_ids=ids).logits[0, 0]).item()


@pytest.mark.parametrize("batch_size", [1, 4])
def test_a_reward_model_scores_each_pair_as_alone(reward_model_dir: Path, batch_size: int) -> None:
    rewards = {"chat": RewardModelConfig(model=str(reward_model_dir), batch_size=batch_size, device="cpu")}
    results, judged = score_groups(["chat", "chat", "math"], PROMPTS, [None, None, "3"],
                                   COMPLETIONS, VerifierSettings(rewards=rewards), {})
    assert judged == {}
    assert [(r.score, r.status) for r in results[2]] == [(1.0, "pass"), (0.0, "unparsable")]  # math: its verifier
    expected = [[alone(reward_model_dir, prompt, text) for text in group] for prompt, group in zip(PROMPTS[:2], COMPLETIONS)]
    got = [r.score for group in results[:2] for r in group]
    assert got == pytest.approx([score for group in expected for score in group], abs=1e-5)
    assert len({round(score, 6) for score in got}) == 4  # random weights, four different pairs
    assert all(r.status == "fail" for group in results[:2] for r in group)  # a reward below 1 is a scored verdict
