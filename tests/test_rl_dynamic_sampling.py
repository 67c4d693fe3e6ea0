"""Dynamic sampling (training/rl/batches/dynamic_sampling.py, tasks/rollouts/collect.py): the pool's bookkeeping
by hand, then the rl flow on test_flow_rl.py's tiny digit model (it answers "1" or "2" about half
each, so some groups of 4 agree and carry no signal)."""

from __future__ import annotations

import pytest
import torch
from prefect.testing.utilities import prefect_test_harness
from test_flow_rl import EVAL_PROMPTS, TRAIN_PROMPTS, _digit_model, _rows_file, _state, _tiny_config, _weights

from passband.flows.rl.flow import rl
from passband.training.rl.batches.dynamic_sampling import (ROUND_SEED_STRIDE, DynamicSamplingConfig, GroupPool,
                                                   round_prompts, round_seed)


def test_pool_keeps_informative_groups_in_draw_order_and_drops_the_excess() -> None:
    pool: GroupPool[str] = GroupPool(need=3)
    pool.add_round(["a", "b", "c"], [False, True, True])
    assert pool.missing == 2 and pool.informative == ["a"] and pool.zero_variance == ["b", "c"]
    assert round_prompts(pool.missing, 1.5) == 3
    pool.add_round(["d", "e", "f"], [False, False, False])  # f is past a full batch
    assert pool.informative == ["a", "d", "e"] and pool.missing == 0 and pool.dropped_excess == 1
    assert pool.batch("fail", iteration=1, rounds=2) == ["a", "d", "e"]
    assert pool.metrics(2) == {
        "dynamic_sampling/rounds": 2.0, "dynamic_sampling/sampled_groups": 6.0,
        "dynamic_sampling/informative_groups": 3.0, "dynamic_sampling/filled_zero_variance_groups": 0.0,
        "dynamic_sampling/dropped_excess_groups": 1.0, "dynamic_sampling/sampled_zero_variance_frac": 2 / 6}


def test_short_pool_fills_with_zero_variance_groups_or_fails() -> None:
    pool: GroupPool[str] = GroupPool(need=3)
    pool.add_round(["a", "b", "c"], [True, False, True])
    pool.add_round(["d", "e"], [True, True])
    assert pool.batch("fill", iteration=4, rounds=2) == ["b", "a", "c"]  # informative first, then draw order
    assert pool.metrics(2)["dynamic_sampling/filled_zero_variance_groups"] == 2.0
    with pytest.raises(RuntimeError, match="RL iteration 4: dynamic sampling found 1 of 3 groups .* in 2 round"):
        pool.batch("fail", iteration=4, rounds=2)


def test_round_seeds() -> None:
    assert round_seed(12, 0) == 12  # round 0 samples as the loop without dynamic sampling does
    assert round_seed(12, 2) == 12 + 2 * ROUND_SEED_STRIDE
    assert round_prompts(2, 1.0) == 2 and round_prompts(3, 2.0) == 6 and round_prompts(1, 1.01) == 2


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=300):
        yield


def test_flow_trains_on_informative_groups_and_resumes(harness, tmp_path, monkeypatch) -> None:
    _digit_model(tmp_path / "digits")
    _rows_file(tmp_path / "train.jsonl", TRAIN_PROMPTS)
    _rows_file(tmp_path / "eval.jsonl", EVAL_PROMPTS)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-rl-dynamic")
    dynamic = DynamicSamplingConfig(max_rounds=4, oversample=1.0)

    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_a"))
    full = rl(_tiny_config(tmp_path, dynamic_sampling=dynamic))
    states = [_state(full.outputs["checkpoint"].replace("iter-000002", f"iter-{i:06d}")) for i in (1, 2)]
    for state in states:
        m = state["metrics"]
        drawn = m["dynamic_sampling/sampled_groups"]
        assert m["dynamic_sampling/informative_groups"] + m["dynamic_sampling/filled_zero_variance_groups"] == 2
        # trained on: the informative groups, then fillers; the batch's zero-variance share is the fillers'
        assert m["zero_variance_group_frac"] == m["dynamic_sampling/filled_zero_variance_groups"] / 2
        assert 2 <= drawn <= 2 * m["dynamic_sampling/rounds"]
        assert len(state["prompt_ids"]) == 2
    # every prompt drawn advances the cursor: 8 rows, so the counts wrap into the next epoch
    drawn_total = sum(s["metrics"]["dynamic_sampling/sampled_groups"] for s in states)
    assert states[1]["consumed"] == {"math": int(drawn_total)}
    assert any(s["metrics"]["dynamic_sampling/rounds"] > 1 for s in states)  # some round came back short

    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_b"))
    rl(_tiny_config(tmp_path, dynamic_sampling=dynamic, max_iterations_this_run=1))
    resumed = rl(_tiny_config(tmp_path, dynamic_sampling=dynamic))
    resumed_states = [_state(resumed.outputs["checkpoint"].replace("iter-000002", f"iter-{i:06d}")) for i in (1, 2)]
    assert [s["prompt_ids"] for s in resumed_states] == [s["prompt_ids"] for s in states]
    assert resumed_states[1]["consumed"] == states[1]["consumed"]
    full_weights, resumed_weights = _weights(full.outputs["checkpoint"]), _weights(resumed.outputs["checkpoint"])
    assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)
