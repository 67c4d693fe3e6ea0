"""Partial rollouts (rollout.partial; training/rl/batches/partial.py, tasks/rollouts/partial.py).

An engine slow on some prompts (their answers are long) ends the iteration early: it trains on the
fast groups and carries the slow ones, whose answers finish in the next iteration under the next
weights, every token tagged with the version that sampled it and keeping that version's engine
log-prob, which the mismatch correction divides by (checked by hand). On the shipped model with the
hf engine: continuations start from the exact tokens, a rerun and a checkpoint round trip of the
carried answers give the same tokens. The kill -9 resume is tests/test_kill9.py's partial case.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from passband.flows.rl.config import RLConfig
from passband.tasks.rollouts.partial import collect_partial
from passband.training.engines import EngineConfig, Sample, SamplingConfig, open_engine
from passband.training.model_source import load_tokenizer
from passband.training.rl.algebra.mismatch import importance_weights
from passband.training.rl.batches.partial import OpenGroup, needed_complete, token_lags
from passband.training.rl.batches.staleness import check_token_staleness
from passband.training.rl.monitoring.rollout_records import rollout_records

SHORT = [2, 3, 4, 3]
"""The fast prompts' answer lengths (tokens), sample by sample."""
LONG = 40
"""Every answer to a slow prompt."""


def engine_logp(version: int, position: int) -> float:
    """The scripted engine's log-prob of the token at `position` of an answer, under weights `version`."""
    return -(version + 1) / 10 - position / 1000


class SlowOnSomePrompts:
    """A RolloutEngine whose answers to prompts mentioning 'slow' run LONG tokens and the others SHORT:
    a long-tailed batch with known lengths. Answer j's tokens are all 1000 + j (so a continuation knows
    which answer it continues); its last token's text is its verdict ('2' right, '3' wrong, by j)."""

    name = "scripted"

    def __init__(self, tokenizer):
        self.tokenizer, self.version, self.tokens = tokenizer, 0, 0
        self.prompts: dict[tuple[int, ...], bool] = {}  # prompt ids -> slow

    def _answer(self, prompt_ids: list[int], answer: list[int], j: int, max_tokens: int) -> Sample:
        slow = self.prompts[tuple(prompt_ids)]
        target = LONG if slow else SHORT[j]
        new = min(max_tokens, target - len(answer))
        self.tokens += new
        positions = range(len(answer), len(answer) + new)
        ends = len(answer) + new == target
        text = "".join(("2" if j % 2 == 0 else "3") if ends and p == target - 1 else " " for p in positions)
        return Sample(0, j, [1000 + j] * new, text, [engine_logp(self.version, p) for p in positions],
                      "stop" if ends else "length", list(prompt_ids) + answer)

    def generate(self, prompts, sampling, prompt_keys=None):
        groups = []
        for prompt in prompts:
            if isinstance(prompt, str):  # a new prompt: G answers
                ids = self.tokenizer(prompt, add_special_tokens=False).input_ids
                self.prompts[tuple(ids)] = "slow" in prompt
                groups.append([self._answer(ids, [], j, sampling.max_tokens) for j in range(sampling.n)])
            else:  # a continuation: the prompt's ids, then answer j's tokens so far
                ids = next(list(key) for key in self.prompts if tuple(prompt[:len(key)]) == key)
                answer = prompt[len(ids):]
                groups.append([self._answer(ids, answer, answer[0] - 1000, sampling.max_tokens)])
        return groups


def _rows(names: list[str]) -> list[dict]:
    return [{"id": name, "task": "math", "prompt": f"What is 1 + 1? ({name})", "reference": "2"} for name in names]


def _settings(**partial):
    config = RLConfig(prompts_per_step=4, sampling=SamplingConfig(n=4, temperature=1.0, max_tokens=64),
                      rollout={"partial": {"chunk_tokens": 8, "min_complete": 0.5, "max_carries": 1} | partial})
    return config.rollout_settings()


@pytest.fixture(autouse=True)
def scoring_outside_a_flow(monkeypatch):
    """The verifiers' scoring without its Prefect task wrapper (these tests run no flow, whose API it would start)."""
    from passband.tasks.steps import rl

    monkeypatch.setattr(rl, "score_rollouts", rl.score_rollouts.fn)


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: Path):
    return load_tokenizer(smollm2_dir)


def test_an_iteration_ends_when_enough_groups_are_done_and_the_slow_ones_finish_next_under_new_weights(tokenizer):
    settings = _settings()
    engine = SlowOnSomePrompts(tokenizer)
    problems = {"math": _rows(["fast-a", "slow-b", "fast-c", "slow-d"])}

    first = collect_partial(settings, tokenizer, engine, problems, {"math": 0}, [], 1, 11, 0)
    # one round of 8 tokens: the fast groups ended (2 of 4 = min_complete 0.5), the slow ones carried
    assert sorted(g.row["id"] for g in first.groups) == ["fast-a", "fast-c"]
    assert sorted(g["row"]["id"] for g in first.carried) == ["slow-b", "slow-d"]
    assert first.metrics["partial/rounds"] == 1 and first.metrics["partial/carried_open_answers"] == 8
    # it ended early: the engine wrote 2 x 12 fast tokens and 8 x 8 of the 8 x 40 slow ones
    assert engine.tokens == 2 * sum(SHORT) + 8 * 8 < 2 * sum(SHORT) + 8 * LONG
    for group in first.carried:
        assert all(s["token_versions"] == [0] * 8 and s["finish_reason"] == "open" for s in group["samples"])
    assert first.batch.rewards == [1.0, 0.0, 1.0, 0.0] * 2  # the verdict tokens ('2' right, '3' wrong)

    # the checkpoint keeps the carried groups as JSON; the next weights (v1) continue them
    carried = json.loads(json.dumps(first.carried))
    engine.version = 1
    second = collect_partial(settings, tokenizer, engine, problems, first.consumed, carried, 2, 12, 1)
    finished = [g for g in second.groups if g.row["id"].startswith("slow")]
    # carried max_carries = 1 times: sampled to the end in this iteration's first round, before any new prompt
    assert [g.row["id"] for g in second.groups[:2]] == [g["row"]["id"] for g in carried]
    for group in finished:
        for sample in group.samples:
            assert len(sample.token_ids) == LONG and sample.finish_reason == "stop"
            assert sample.token_versions == [0] * 8 + [1] * 32
            # each token keeps the engine log-prob of the weights that sampled it
            assert sample.logprobs == [engine_logp(0 if p < 8 else 1, p) for p in range(LONG)]
            assert token_lags(sample, 2) == [1] * 8 + [0] * 32
    assert second.metrics["partial/spanning_answers"] == 8 and second.metrics["partial/max_token_lag"] == 1
    assert second.metrics["partial/trained_from_carried"] == 2
    # the new prompts topped the groups in flight back up to prompts_per_step, no more
    assert len(second.groups) + len(second.carried) == 2 + 2
    # the batch's behaviour log-probs are the tokens' own, and the record says who wrote the answer first
    row = [g.row["id"] for g in second.groups].index(finished[0].row["id"]) * 4
    assert second.batch.engine_logp[row] == finished[0].samples[0].logprobs
    records = rollout_records(2, second.weight_version, [g.row for g in second.groups], [g.samples for g in second.groups],
                              [g.scores for g in second.groups], [g.statuses for g in second.groups],
                              [g.details for g in second.groups], second.batch.rewards, second.batch.valid, True, 1e-6)
    firsts = {(r["prompt_id"], r["first_weight_version"], r["weight_version"]) for r in records}
    assert {("slow-b", 0, 1), ("slow-d", 0, 1)} <= firsts


def test_the_correction_divides_by_each_tokens_own_behaviour_log_prob(tokenizer):
    settings = _settings()
    engine = SlowOnSomePrompts(tokenizer)
    problems = {"math": _rows(["fast-a", "slow-b", "fast-c", "slow-d"])}
    first = collect_partial(settings, tokenizer, engine, problems, {"math": 0}, [], 1, 11, 0)
    engine.version = 1
    second = collect_partial(settings, tokenizer, engine, problems, first.consumed, first.carried, 2, 12, 1)
    row = next(i for i, ids in enumerate(second.batch.response_ids) if len(ids) == LONG)
    behaviour = torch.tensor([second.batch.engine_logp[row]], dtype=torch.float64)
    trainer = torch.full_like(behaviour, -0.16)  # the trainer's log-prob of every token, by hand
    mask = torch.ones_like(behaviour)
    # by hand: rho_t = exp(-0.16 - engine_logp(version_t, t)), versions 0 for the first 8 tokens and 1 after
    rho = [math.exp(-0.16 - engine_logp(0 if t < 8 else 1, t)) for t in range(LONG)]
    token_mis = importance_weights(trainer, behaviour, mask, "token_mis", threshold=1.05)[0].tolist()
    assert token_mis == pytest.approx([r if 1 / 1.05 <= r <= 1.05 else 0.0 for r in rho], abs=1e-12)
    assert 0 < sum(w == 0 for w in token_mis) < LONG  # the v0 tokens (rho ~ 0.94) fall outside, the v1 ones in
    seq = math.prod(rho)
    seq_mis = importance_weights(trainer, behaviour, mask, "seq_mis", threshold=2.0)[0].tolist()
    assert seq_mis == pytest.approx([seq if seq <= 2.0 else 0.0] * LONG, rel=1e-9)


def test_min_complete_one_waits_for_every_group(tokenizer):
    settings = _settings(min_complete=1.0, max_carries=2)
    engine = SlowOnSomePrompts(tokenizer)
    rollouts = collect_partial(settings, tokenizer, engine, {"math": _rows(["fast-a", "slow-b"])}, {"math": 0}, [], 1, 11, 0)
    # 4 prompts drawn over 2 rows (each twice), every group complete after 5 rounds of 8 = 40 tokens
    assert rollouts.carried == [] and len(rollouts.groups) == 4 and rollouts.metrics["partial/rounds"] == 5
    assert needed_complete(8, 0.75) == 6 and needed_complete(4, 0.5) == 2 and needed_complete(3, 1.0) == 3


def test_a_token_beyond_the_staleness_bound_is_refused_naming_the_row():
    check_token_staleness(5, "m1", [2, 3, 4], 2)  # lags 2, 1, 0
    with pytest.raises(RuntimeError, match=r"iteration 5: an answer to m1 holds tokens 3 updates off policy"):
        check_token_staleness(5, "m1", [1, 4], 2)
    with pytest.raises(RuntimeError, match="outside"):
        check_token_staleness(5, "m1", [5], 2)  # weights not published yet


@pytest.mark.parametrize("setting,named", [
    ({"dynamic_sampling": {}}, "dynamic_sampling"),
    ({"rollout": {"max_off_policy_steps": 1, "partial": {}}}, "rollout.max_off_policy_steps"),
    ({"math_tool": {}}, "math_tool"),
    ({"code_feedback": {}}, "code_feedback"),
])
def test_what_partial_rollouts_do_not_combine_with_is_refused_in_one_line(setting, named):
    values = {"rollout": {"partial": {}}} | setting
    with pytest.raises(ValueError, match=rf"does not combine with {named} \(set one of them off\)"):
        RLConfig(**values)


@pytest.mark.slow  # the hf engine writes 3 rounds twice: 83 s on the 2-core box under load
def test_on_the_shipped_model_continuations_start_from_the_exact_tokens_and_a_rerun_repeats_them(smollm2_dir, tokenizer):
    """A group carried in with 8 tokens per answer (the engine's own first chunk under weights v0) is written on by the
    real engine (hf, fp32) in rounds of 8 to max_tokens or EOS: every answer starts with exactly its carried tokens,
    log-probs and versions, its text is its tokens' decoding, and a second run, from the carried group as a
    checkpoint keeps it (JSON), writes the same tokens."""
    from passband.training.chat import render_prompt
    from passband.training.rl.batches.partial import first_chunk

    settings = RLConfig(prompts_per_step=1, sampling=SamplingConfig(n=2, temperature=1.0, max_tokens=32),
                        rollout={"partial": {"chunk_tokens": 8, "min_complete": 1.0, "max_carries": 2}}).rollout_settings()
    row = {"id": "long", "task": "math", "prompt": "Explain step by step, in detail, how to add 17 and 25.",
           "reference": "42"}
    engine = open_engine(EngineConfig(kind="hf", dtype="float32"), smollm2_dir)
    (chunks,) = engine.generate([render_prompt(tokenizer, row["prompt"])],
                                settings.sampling.model_copy(update={"seed": 3, "max_tokens": 8}))
    group = OpenGroup(row, list(chunks[0].prompt_token_ids), [first_chunk(c, 0, 32) for c in chunks], carries=1,
                      drawn_at=1)
    assert all(len(s.token_ids) == 8 and s.finish_reason == "open" for s in group.samples), "the first chunk ended"
    carried = [group.to_json()]
    runs = [collect_partial(settings, tokenizer, engine, {"math": [row]}, {"math": 1}, json.loads(json.dumps(carried)),
                            2, 6, 1) for _ in range(2)]
    engine.close()
    (finished,) = runs[0].groups
    assert runs[0].carried == [] and runs[0].metrics["partial/trained_from_carried"] == 1
    for before, after in zip(group.samples, finished.samples):
        assert after.token_ids[:8] == before.token_ids and after.logprobs[:8] == before.logprobs
        assert after.token_versions == [0] * 8 + [1] * (len(after.token_ids) - 8) and len(after.token_ids) > 8
        assert len(after.logprobs) == len(after.token_ids) <= 32 and after.finish_reason in ("stop", "length")
        # the text is what the tokens say: each round continued the tokens, not a re-encoding of the text
        assert after.text == tokenizer.decode(after.token_ids, skip_special_tokens=True)
    assert [(s.token_ids, s.logprobs, s.token_versions) for s in runs[1].groups[0].samples] == \
           [(s.token_ids, s.logprobs, s.token_versions) for s in finished.samples]
    assert OpenGroup.from_json(carried[0]).to_json() == carried[0]
