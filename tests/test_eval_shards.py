"""Evaluation shards without a server or a model: cutting the sets, the shards' content keys, and
an evaluation whose shards are all committed built from the store in the sets' order.
(The shards on real task workers with the real model: tests/test_eval_task_workers.py, slow.)"""

from __future__ import annotations

import pytest

from passband.curation.catalog import VerifierSettings
from passband.tasks.sampling.eval_shards import EvalShardsConfig, eval_shard_jobs, evaluate_on_task_workers
from passband.training.engines import EngineConfig, SamplingConfig
from passband.training.evaluation.evaluate import evaluation_of
from passband.training.evaluation.shards import cut_eval_sets


def _problem(task: str, index: int) -> dict:
    return {"id": f"{task}-{index}", "task": task, "prompt": f"question {index}", "reference": str(index),
            "subdomain": "all"}


SETS = {"math": [_problem("math", i) for i in range(5)], "code": [_problem("code", i) for i in range(2)]}


def _jobs(sets=SETS, shard_size=3, sampling=SamplingConfig(n=2)):
    return eval_shard_jobs(sets, "/models/m", "/models/m@0123", EngineConfig(), sampling, VerifierSettings(), None,
                           shard_size)


def test_shards_keep_the_sets_order_and_may_span_two_sets():
    shards = cut_eval_sets(SETS, 3)
    assert [{name: [row["id"] for row in rows] for name, rows in shard.items()} for shard in shards] == [
        {"math": ["math-0", "math-1", "math-2"]},
        {"math": ["math-3", "math-4"], "code": ["code-0"]},
        {"code": ["code-1"]},
    ]
    for size in (1, 2, 7, 100):  # every cut, concatenated, gives back the sets
        assert [(name, row) for shard in cut_eval_sets(SETS, size) for name, rows in shard.items() for row in rows] \
            == [(name, row) for name, rows in SETS.items() for row in rows]


def test_a_shard_key_names_its_content_not_its_position():
    jobs = _jobs()
    assert [job.key for job in jobs] == [job.key for job in _jobs()]  # stable across calls
    assert len({job.key for job in jobs}) == 3 and all(job.key.startswith("eval-shards/") for job in jobs)
    # the same first shard in a larger evaluation has the same key; another seed, another key
    larger = {**SETS, "ifeval": [_problem("ifeval", 0)]}
    assert _jobs(larger)[0].key == jobs[0].key
    assert _jobs(sampling=SamplingConfig(n=2, seed=1))[0].key != jobs[0].key
    edited = {"math": [{**SETS["math"][0], "reference": "changed"}, *SETS["math"][1:]], "code": SETS["code"]}
    assert _jobs(edited)[0].key != jobs[0].key and _jobs(edited)[1].key == jobs[1].key
    assert jobs[1].manifest_config["problems"] == ["math/math-3", "math/math-4", "code/code-0"]


def _rows(shard: dict[str, list[dict]], n: int) -> list[dict]:
    """Rows in the shape evaluate() gives, sample i of problem p passing when i < p's index."""
    return [{"eval_set": name, "problem_id": row["id"], "task": row["task"], "subdomain": row["subdomain"],
             "sample_index": i, "status": "pass" if i < int(row["reference"]) else "fail",
             "score": float(i < int(row["reference"])), "detail": None, "text": f"{row['id']}#{i}",
             "finish_reason": "stop", "num_tokens": 2, "token_ids": [i, 7], "prompt_token_ids": [1, 2, 3]}
            for name, rows in shard.items() for row in rows for i in range(n)]


def test_committed_shards_are_read_back_in_order_without_any_worker(tmp_path, monkeypatch):
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    from passband.tasks.sampling.eval_job import commit_eval_shard

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    from passband.tasks.sampling.keys import checkpoint_id

    jobs = eval_shard_jobs(SETS, str(model_dir), checkpoint_id(str(model_dir), str(model_dir)), EngineConfig(),
                           SamplingConfig(n=2), VerifierSettings(), None, 3)
    # commit them in reverse, as workers finishing in any order would
    for job in reversed(jobs):
        commit_eval_shard.fn(job.key, _rows(job.sets, 2), job.manifest_config)
    with prefect_test_harness(server_startup_timeout=120):
        # no workers and no dispatch: with a shard missing, this would wait for a task worker
        config = EvalShardsConfig(workers="task_workers", shard_size=3, connect_timeout_s=0.01)
        evaluation = evaluate_on_task_workers(str(model_dir), str(model_dir), EngineConfig(), SETS,
                                              SamplingConfig(n=2), VerifierSettings(), None, config)
        assert evaluation.rows == _rows(SETS, 2)
        assert evaluation.report.metrics() == evaluation_of(_rows(SETS, 2)).report.metrics()
        # a shard not committed goes to the workers, and there are none
        with temporary_settings(updates={PREFECT_API_URL: None}):
            with pytest.raises(ValueError, match="needs a Prefect server"):
                evaluate_on_task_workers(str(model_dir), str(model_dir), EngineConfig(), SETS,
                                         SamplingConfig(n=2, seed=5), VerifierSettings(), None, config)
