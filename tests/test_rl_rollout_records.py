"""Rollout records (training/rl/monitoring/rollout_records.py): the fields of each, the group advantage as the
update computes it, and the per-task sample shown each iteration, on hand-made rollouts."""

from __future__ import annotations

import pytest

from passband.training.engines.protocol import Sample
from passband.training.rl.monitoring.rollout_records import (ROLLOUT_COLUMNS, iteration_sample, rollout_records,
                                                  sample_markdown)


def _sample(text: str, logprobs: list[float], finish: str = "stop") -> Sample:
    return Sample(prompt_index=0, sample_index=0, token_ids=list(range(len(logprobs))), text=text, logprobs=logprobs,
                  finish_reason=finish)


def _records():
    rows = [{"id": "m1", "task": "math"}, {"id": "c1", "task": "code"}]
    samples = [[_sample("4", [-0.5, -1.5]), _sample("5", [-1.0]), _sample("??", [-2.0, -2.0, -2.0], "length")],
               [_sample("ok", [-0.1]), _sample("ok", [-0.3]), _sample("no", [-0.2])]]
    scores = [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    statuses = [["pass", "fail", "unparsable"], ["pass", "pass", "fail"]]
    details = [["read 4", "read 5", "no number"], ["", "", "case 1 failed"]]
    rewards = [1.0, 0.0, float("nan"), 1.0, 1.0, 0.0]  # the batch's: NaN where not a verdict
    valid = [True, True, False, True, True, True]
    return rollout_records(3, 2, rows, samples, scores, statuses, details, rewards, valid, scale_by_std=False, eps=1e-6)


def test_one_record_per_rollout_with_every_field_and_the_group_advantage() -> None:
    records = _records()
    assert [tuple(r) for r in records] == [ROLLOUT_COLUMNS] * 6
    first, _, unparsable, *_ = records
    assert (first["iteration"], first["weight_version"], first["prompt_id"], first["task"], first["sample_index"]) == \
        (3, 2, "m1", "math", 0)
    assert (first["num_tokens"], first["engine_logp_mean"], first["reward"], first["status"]) == (2, -1.0, 1.0, "pass")
    # an invalid row: no reward, its score and status kept, advantage 0; math's valid rewards 1, 0: mean 0.5
    assert (unparsable["reward"], unparsable["score"], unparsable["valid"], unparsable["advantage"]) == \
        (None, 0.0, False, 0.0)
    assert [r["advantage"] for r in records[:2]] == [0.5, -0.5]
    # code: 1, 1, 0 -> mean 2/3 -> +1/3, +1/3, -2/3 (mean-only: scale_by_std off)
    assert [r["advantage"] for r in records[3:]] == pytest.approx([1 / 3, 1 / 3, -2 / 3])


def test_the_iteration_sample_is_best_worst_and_random_per_task() -> None:
    records = _records()
    sample = iteration_sample(records, num_random=1, seed=0)
    assert list(sample) == ["code", "math"]
    math = sample["math"]
    assert [label for label, _ in math] == ["best", "worst", "random"]
    # best: score 1; worst: the longest of the two score-0 rollouts (3 tokens, unparsable)
    assert (math[0][1]["completion"], math[1][1]["completion"], math[2][1]["completion"]) == ("4", "??", "5")
    text = sample_markdown(3, sample)
    assert "## math" in text and "**worst**: `m1` sample 2, unparsable, score 0.00, advantage +0.00, 3 tokens (length)" \
        in text


def test_kept_parts_read_back_in_order_and_passband_rollouts_filters_them(tmp_path, monkeypatch) -> None:
    """Two iterations kept (the second twice, as a resumed run writes it again), read back whole with
    pyarrow, and printed by `passband rollouts URI` with its filters."""
    from click.testing import CliRunner

    from passband.cli.main import main
    from passband.tasks.steps.rollouts_log import keep_rollouts, read_rollouts

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    first = [dict(r, iteration=1) for r in _records()]
    uri, size = keep_rollouts(first, "run-a", 1, {})
    keep_rollouts(_records(), "run-a", 3, {})
    keep_rollouts(_records(), "run-a", 3, {})  # the same iteration again replaces its part
    assert size > 0 and read_rollouts(uri).column("iteration").to_pylist() == [1] * 6 + [3] * 6
    keep_rollouts(first, "run-a", 1, {})  # a resumed run rewriting iteration 1 drops the later part
    assert read_rollouts(uri).num_rows == 6

    keep_rollouts([dict(r, iteration=2) for r in _records()], "run-a", 2, {})
    result = CliRunner().invoke(main, ["rollouts", uri, "--iteration", "2", "--task", "code", "--status", "pass"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("iteration 2 code c1 sample") == 2 and "fail" not in result.stdout
    none = CliRunner().invoke(main, ["rollouts", uri, "--status", "timeout"])
    assert none.exit_code == 0 and none.stdout == "" and "no rollouts match" in none.stderr
