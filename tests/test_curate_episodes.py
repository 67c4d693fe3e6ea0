"""Curation over whole episodes (issue 55 item 4): with `code_feedback` on, each of a code problem's
attempts is an episode of tries with the tests' feedback, graded on its last try in the sandbox; the
pass count is counted by hand from the scripted tries. The passing episodes become SFT traces that
hold their exact tokens, which SFT trains on as they are (the mask on the scripted tries only). The
episode settings go into a shard's key only for the task they apply to."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from episode_fixtures import ScriptedPolicy
from passband.curation.catalog import VerifierSettings
from passband.curation.curate_rows import sft_table
from passband.flows.curate.sft import _rollout_traces
from passband.flows.curate.config import CurateConfig
from passband.tasks.sampling.keys import sources_version
from passband.tasks.sampling.passrate_job import ShardSampling, sample_shard
from passband.training.engines.config import SamplingConfig
from passband.training.episodes.code_feedback import CodeFeedbackConfig
from passband.training.evaluation.perplexity import trace_perplexities
from passband.training.sft.data import encode_rows
from tiny_chat_model import IM_END, tiny_llama, tiny_tokenizer

ROW = {"id": "c0", "task": "code", "prompt": "Write add(a, b) returning a + b.",
       "reference": {"tests": "assert add(1, 2) == 3\nassert add(2, 2) == 4\n", "entry_point": "add"}}
WRONG = list("```python\ndef add(a, b):\n    return a * b\n```".encode()) + [IM_END]
RIGHT = list("```python\ndef add(a, b):\n    return a + b\n```".encode()) + [IM_END]


def _sampling(**episodes) -> ShardSampling:
    return ShardSampling(sampling=SamplingConfig(n=3, max_tokens=200), engine_kind="vllm", engine_dtype="float32",
                         **episodes)


# episode keys are <row index>/<id>/<attempt>: right on the second try, right at once, never right
TRIES = {"0/c0/0": [WRONG, RIGHT], "0/c0/1": [RIGHT], "0/c0/2": [WRONG, WRONG, WRONG]}


def _episode_shard():
    return sample_shard.fn([ROW], ScriptedPolicy(TRIES), tiny_tokenizer(),
                           _sampling(code_feedback=CodeFeedbackConfig()), VerifierSettings(), None)


def _sampled(input_ids: list[int], loss_mask: list[int]) -> list[int]:
    return [token for token, m in zip(input_ids, loss_mask, strict=True) if m]


def test_a_code_problems_attempts_are_whole_feedback_episodes():
    summaries, samples = _episode_shard()
    assert [(s["sample_index"], s["num_turns"], s["num_tool_calls"], s["status"]) for s in samples] == \
        [(0, 2, 0, "pass"), (1, 1, 0, "pass"), (2, 3, 0, "fail")]  # max_attempts 3: the third try is graded
    assert (summaries[0]["pass_count"], summaries[0]["num_samples"]) == (2, 3)
    assert summaries[0]["pass_rate"] == 2 / 3
    # each attempt keeps its exact tokens: the mask marks the scripted tries, in order, and nothing else
    for sample, key in zip(samples, TRIES):
        assert _sampled(sample["input_ids"], sample["loss_mask"]) == [t for turn in TRIES[key] for t in turn]
        assert sample["loss_mask"].index(1) > 0 and len(sample["input_ids"]) > sum(sample["loss_mask"])


def test_passing_episodes_become_token_exact_sft_traces():
    _, samples = _episode_shard()
    config = CurateConfig.model_validate({"code_feedback": {}, "pass_rate": {"sampling": {"n": 3}}})
    problem = ROW | {"subdomain": "arithmetic", "band": "medium", "pass_rate": 2 / 3, "source": "test"}
    sets = _rollout_traces(config, "code", [problem], samples, SimpleNamespace(checkpoint="student"),
                           config.pass_rate_sampling())
    rows = sft_table(sets.stage1 + sets.stage2).to_pylist()  # through the SFT sets' typed schema
    assert [row["sample_index"] for row in rows] == [0, 1]  # the two passing episodes, 0 < 2 < 3 passes
    assert [(row["input_ids"], row["loss_mask"]) for row in rows] == \
        [(samples[i]["input_ids"], samples[i]["loss_mask"]) for i in (0, 1)]
    examples, quarantined = encode_rows(tiny_tokenizer(), rows, max_length=2048)
    assert quarantined == []
    assert [(e.input_ids, e.loss_mask) for e in examples] == [(row["input_ids"], row["loss_mask"]) for row in rows]
    # a row whose tokens do not decode to its completion (another tokenizer's ids) is quarantined, not trained
    other = rows[0] | {"completion": "def add(a, b): return b + a"}
    examples, quarantined = encode_rows(tiny_tokenizer(), [other], max_length=2048)
    assert examples == [] and "another tokenizer" in quarantined[0]["removed_reason"]


def test_an_episode_traces_perplexity_is_over_its_sampled_tokens():
    _, samples = _episode_shard()
    model, tokenizer = tiny_llama(), tiny_tokenizer()
    ids, mask = samples[0]["input_ids"], samples[0]["loss_mask"]
    (value,) = trace_perplexities(model, tokenizer, ["unused"], ["unused"], episodes=[(ids, mask)])
    # by hand: one forward over the whole episode, the log-prob of each sampled token given all before it
    with torch.no_grad():
        logps = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    picked = [logps[t - 1, ids[t]].item() for t in range(1, len(ids)) if mask[t]]
    assert value == pytest.approx(math.exp(-sum(picked) / len(picked)), rel=1e-5)


def test_episode_settings_key_only_their_task():
    plain = _sampling()
    with_feedback = _sampling(code_feedback=CodeFeedbackConfig())
    assert "code_feedback" not in plain.key_fields() and len(plain.key_fields()) == 9
    assert with_feedback.key_fields() == plain.key_fields() | {"code_feedback": CodeFeedbackConfig().model_dump(mode="json"),
                                                               "episodes_source": sources_version(("training/episodes",))}
    assert with_feedback.for_task("math").key_fields() == plain.key_fields()
    assert with_feedback.for_task("code") == with_feedback


def test_curate_samples_pass_rates_as_episodes_and_teachers_single_turn():
    config = CurateConfig(code_feedback=CodeFeedbackConfig())
    assert config.pass_rate_sampling().code_feedback == CodeFeedbackConfig()
    assert config.shard_sampling(config.correction.sampling, 1).code_feedback is None
    # off, the config dumps (and keys its stage) as before the setting existed
    assert "code_feedback" not in CurateConfig().model_dump(mode="json")
