"""One RL run whose math reward comes from a judge model (issue 31 item 3): tiny models on the hf
engine, the policy answering "1" or "2", the judge fitted to write one of two fixed evaluations
(tests/test_judge.py). The judge's texts land in the run as judge/iter-NNNNNN.jsonl, one row per
rollout, and the reward the trainer saw is the one those texts give."""

import json

import pytest
from mlflow import MlflowClient

from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.flows.rl.flow import RewardConfig, RLConfig, rl
from passband.training.judge.config import JudgeConfig
from passband.training.rl.config import RLAlgoConfig
from test_flow_rl import TRAIN_PROMPTS, _digit_model, _rows_file, harness  # noqa: F401  (harness: a fixture)
from test_judge import _judge_model, _one_thread, _score_of


def test_an_rl_iteration_rewarded_by_a_judge_logs_its_texts(harness, tmp_path, monkeypatch):  # noqa: F811
    with _one_thread():
        _digit_model(tmp_path / "digits")
        _judge_model(tmp_path / "judge", fit_steps=120)
    _rows_file(tmp_path / "train.jsonl", TRAIN_PROMPTS)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-rl-judge")
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root"))
    judge = JudgeConfig(model=str(tmp_path / "judge"), engine=EngineConfig(kind="hf", dtype="float32"),
                        sampling=SamplingConfig(n=2, temperature=1.0, max_tokens=130))

    def config(judges):
        return RLConfig(
            model=str(tmp_path / "digits"),
            datasets={"math": ProblemSource(suite=None, path=str(tmp_path / "train.jsonl"), task="math", num_problems=8)},
            prompts_per_step=2, num_iterations=1, seed=7, sampling=SamplingConfig(n=4, max_tokens=4),
            engine=EngineConfig(kind="hf"), algo=RLAlgoConfig(lr=1e-2, micro_batch_size=4), checkpoint_every=1,
            eval=None, reward=RewardConfig(judges=judges))

    with _one_thread():
        judged = rl(config({"math": judge}))
        programmatic = rl(config({}))
    assert judged.mlflow_run_id != programmatic.mlflow_run_id
    client = MlflowClient()
    assert [a.path for a in client.list_artifacts(judged.mlflow_run_id, "judge")] == ["judge/iter-000001.jsonl"]
    assert client.list_artifacts(programmatic.mlflow_run_id, "judge") == []
    path = client.download_artifacts(judged.mlflow_run_id, "judge/iter-000001.jsonl", str(tmp_path / "dl"))
    records = [json.loads(line) for line in open(path)]
    assert len(records) == 2 * 4 and all(len(r["judge_analyses"]) == 2 for r in records)
    # each rollout's reward, recomputed from its judge texts without the parser
    expected = []
    for record in records:
        parsed = [s for s in map(_score_of, record["judge_analyses"]) if s is not None]
        assert record["judge_scores"] == list(map(_score_of, record["judge_analyses"]))
        assert record["status"] == ("unparsable" if not parsed else "pass" if set(parsed) == {1.0} else "fail")
        expected.append(sum(parsed) / len(parsed) if parsed else 0.0)  # an unparsable row counts 0 in `reward`
    assert judged.metrics["math/reward"] == pytest.approx(sum(expected) / len(expected))
    assert judged.metrics["math/num_judge_samples"] == 16.0
    assert "math/num_judge_samples" not in programmatic.metrics
