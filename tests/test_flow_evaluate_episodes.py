"""The evaluate flow over multi-turn episodes (issue 55 item 4): with `code_feedback` on, the real
SmolLM2 on real code problems, each sample an episode whose last attempt the sandbox grades. The
flow's metrics are recomputed from its committed per-sample rows: pass@1 from the statuses, mean
turns from the rows' turns; an episode ends before its last attempt only on a pass or a cut turn."""

from __future__ import annotations

import pytest
from prefect.testing.utilities import prefect_test_harness

MAX_ATTEMPTS = 2


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def _config(model_dir, **updates):
    from passband.flows.evaluate.flow import EvaluateConfig

    return EvaluateConfig.model_validate({
        # the engine in its own process (evaluate's default): an in-process vLLM cannot start in a pytest
        # process that imported flask (tests/test_weight_versions.py says why)
        "model": str(model_dir),
        # math first: the samples table takes its columns from every row, not the first one
        "suites": {"math": {"suite": "math", "num_problems": 2, "seed": 9001},
                   "code": {"suite": "code", "num_problems": 3, "seed": 9001}},
        "sampling": {"n": 2, "max_tokens": 64}, "perplexity_samples": 2, **updates})


def test_code_sets_evaluate_as_feedback_episodes(harness, smollm2_dir, tmp_path, monkeypatch):
    from passband.flows.evaluate.flow import evaluate
    from passband.tasks.artifacts.datasets import read_table

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    summary = evaluate(_config(smollm2_dir, code_feedback={"environment": {"max_attempts": MAX_ATTEMPTS}}))
    table = read_table(summary.outputs["samples"]).to_pylist()
    assert len(table) == (2 + 3) * 2
    # the single-turn math rows hold nulls where the episode rows hold their turns
    assert {(row["eval_set"], row["num_turns"] is None) for row in table} == {("math", True), ("code", False)}
    rows = [row for row in table if row["eval_set"] == "code"]
    turns = [row["num_turns"] for row in rows]
    assert all(1 <= t <= MAX_ATTEMPTS for t in turns)
    # an episode stops early only when an attempt passes or runs out of tokens (a cut turn is final)
    assert all(row["status"] == "pass" or row["finish_reason"] == "length"
               for row in rows if row["num_turns"] < MAX_ATTEMPTS)
    assert summary.metrics["code/mean_turns"] == pytest.approx(sum(turns) / len(turns))
    assert summary.metrics["code/mean_tool_calls"] == 0.0 and "math/mean_turns" not in summary.metrics
    by_problem: dict[str, list[bool]] = {}
    for row in rows:
        by_problem.setdefault(row["problem_id"], []).append(row["status"] == "pass")
    pass_at_1 = sum(sum(v) / len(v) for v in by_problem.values()) / len(by_problem)
    assert summary.metrics["code/pass@1"] == pytest.approx(pass_at_1)

    single = evaluate(_config(smollm2_dir))
    assert "code/mean_turns" not in single.metrics


def test_episodes_refuse_task_worker_shards(smollm2_dir):
    with pytest.raises(ValueError, match="shards.workers=local"):
        _config(smollm2_dir, math_tool={}, shards={"workers": "task_workers"})
