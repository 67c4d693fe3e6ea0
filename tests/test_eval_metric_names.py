"""SFT and RL name their held-out evaluations in MLflow the same way (issue 28 item 9): every
evaluation is the `eval/<set>/<stat>` series at the training step it scored, its rows the artifact
`eval/<label>.jsonl`; the summaries call the first and the last `before/...` and `after/...`."""

from __future__ import annotations

import inspect
from pathlib import Path

from passband.flows.rl import loop as rl_loop
from passband.flows import sft
from passband.tasks.reporting import tracking
from passband.tasks.steps.evaluation import log_evaluation
from passband.training.evaluation.evaluate import evaluation_of


def _rows() -> list[dict]:
    # math: problem a passes 2 of 2, b 1 of 2 -> pass@1 = (1 + 0.5) / 2 = 0.75, pass@2 = 1
    statuses = {"a": ["pass", "pass"], "b": ["pass", "fail"]}
    return [{"eval_set": "math", "id": pid, "problem_id": pid, "task": "math", "subdomain": "arith",
             "sample_index": index, "status": status, "score": float(status == "pass"), "num_tokens": 4,
             "finish_reason": "stop"} for pid, run in statuses.items() for index, status in enumerate(run)]


def test_an_evaluation_is_the_eval_series_at_its_step(monkeypatch):
    logged, files = [], []
    monkeypatch.setattr(tracking, "log_metrics", lambda metrics, step, run_id=None: logged.append((step, metrics)))
    monkeypatch.setattr(tracking, "log_artifact_file",
                        lambda path, folder=None, run_id=None: files.append((folder, Path(path).name)))
    headline = log_evaluation(evaluation_of(_rows()), "after", 30, "run")
    assert headline == {"math/pass@1": 0.75, "math/pass@2": 1.0, "mean/pass@1": 0.75, "mean/pass@2": 1.0}
    (step, metrics), = logged
    assert step == 30 and {f"eval/{name}" for name in headline} <= set(metrics)
    assert all(name.startswith("eval/") for name in metrics)
    assert files == [("eval", "after.jsonl")]


def test_sft_and_rl_both_log_through_it_and_summarize_before_and_after():
    sft_source, rl_source = inspect.getsource(sft), inspect.getsource(rl_loop)
    assert "log_evaluation(evaluation, label, step, run_id)" in sft_source
    assert "log_evaluation(evaluation, label, step, self.run_id)" in rl_source
    assert '"before", 0' in sft_source and '"after", step_offset' in sft_source
    assert 'f"before/{k}"' in rl_source and 'f"after/{k}"' in rl_source
