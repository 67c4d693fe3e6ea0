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



MATH_PROMPTS = ["What is 1 + 2?", "What is 2 + 2?"]
MATH_COMPLETIONS = [["It is 3", "It is 5", "no idea"], ["4", "Four"]]


@pytest.mark.parametrize(("combine", "weight"), [("sum", 0.25), ("gate", 0.5)])
def test_a_reward_model_combined_with_the_verifier(reward_model_dir: Path, combine: str, weight: float) -> None:
    """math's verifier and the model, per completion: sum = w x verifier + (1 - w) x model, gate = the
    model where the verifier passes and 0 where it fails; statuses stay the verifier's, and an answer
    it cannot read stays unparsable (masked in RL, as without a model)."""
    config = RewardModelConfig(model=str(reward_model_dir), device="cpu", combine=combine, verifier_weight=weight)
    results, _ = score_groups(["math", "math"], MATH_PROMPTS, ["3", "4"], MATH_COMPLETIONS,
                              VerifierSettings(rewards={"math": config}), {})
    statuses = [[r.status for r in group] for group in results]
    assert statuses == [["pass", "fail", "unparsable"], ["pass", "unparsable"]]  # the last-number rule
    verifier = {"pass": 1.0, "fail": 0.0}
    for prompt, group, verdicts in zip(MATH_PROMPTS, MATH_COMPLETIONS, results):
        for text, verdict in zip(group, verdicts):
            model = alone(reward_model_dir, prompt, text)
            if verdict.status == "unparsable":
                assert verdict.score == 0.0
            elif combine == "sum":
                assert verdict.score == pytest.approx(weight * verifier[verdict.status] + (1 - weight) * model, abs=1e-5)
            else:
                assert verdict.score == pytest.approx(model if verdict.status == "pass" else 0.0, abs=1e-5)


def test_a_combination_needs_a_task_with_a_verifier() -> None:
    with pytest.raises(ValueError, match="rewards.chat: combine 'gate' adds the task's own verifier, and 'chat' is not"):
        VerifierSettings(rewards={"chat": RewardModelConfig(model="m", combine="gate")})


def build_vllm_reward_model(path: Path) -> Path:
    """A random tiny Llama sequence classifier vLLM's CPU attention can run (head size 64) and the tiny tokenizer."""
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1, pad_token_id=PAD,
                         max_position_embeddings=512)
    LlamaForSequenceClassification(config).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


@pytest.mark.slow  # starts a vLLM engine: 40-60 s on the shared 2-core box
def test_vllm_pooling_scores_as_transformers(tmp_path: Path) -> None:
    """The same model and pairs through both engines: equal rewards within 1e-5 (both float32; the
    kernels differ: vLLM's CPU attention and fused ops against transformers' eager ones), each the
    sigmoid of the logit of the pair alone."""
    from passband.training.judge.reward_model import _vllm_model

    path = build_vllm_reward_model(tmp_path / "reward_model")
    scored = {}
    for engine in ("transformers", "vllm"):
        config = RewardModelConfig(model=str(path), batch_size=4, max_length=256, device="cpu", engine=engine)
        results, _ = score_groups(["chat", "chat", "math"], PROMPTS, [None, None, "3"], COMPLETIONS,
                                  VerifierSettings(rewards={"chat": config}), {})
        scored[engine] = [r.score for group in results[:2] for r in group]
        assert [(r.score, r.status) for r in results[2]] == [(1.0, "pass"), (0.0, "unparsable")]
    _vllm_model(config).llm_engine.engine_core.shutdown()
    _vllm_model.cache_clear()
    expected = [alone(path, prompt, text) for prompt, group in zip(PROMPTS[:2], COMPLETIONS) for text in group]
    assert scored["transformers"] == pytest.approx(expected, abs=1e-5)
    assert scored["vllm"] == pytest.approx(scored["transformers"], abs=1e-5)
    assert len({round(score, 4) for score in scored["vllm"]}) == 4  # random weights, four different pairs
