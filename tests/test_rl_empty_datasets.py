"""RL with empty datasets: an empty task is left out by name; all empty is one error before any engine."""

from __future__ import annotations

import pytest
from prefect import flow
from prefect.testing.utilities import prefect_test_harness

from passband.curation.suites.rows import rows_to_table
from passband.curation.suites.source import ProblemSource
from passband.tasks.artifacts.datasets import commit_table
from passband.tasks.steps.rl import EmptyTrainingSet, load_rl_problems


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.fixture
def empty_uri(harness, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))

    @flow
    def commit_empty() -> str:
        return commit_table(rows_to_table([]), "datasets/curate/run42/rl_ifeval", "curate", {},
                            extra={"mlflow_run_id": "run42"})

    return commit_empty()


def test_an_empty_task_is_left_out_and_named_with_the_run_that_wrote_it(empty_uri):
    math = ProblemSource(suite="math", num_problems=5, seed=3, difficulty=0)
    problems, dropped, empty = load_rl_problems({"math": math, "ifeval": empty_uri}, set())
    assert sorted(problems) == ["math"] and len(problems["math"]) == 5 and dropped == {"math": 0}
    assert empty == [f"datasets.ifeval ({empty_uri}, written by the curate run run42)"]


def test_every_dataset_empty_is_one_line_before_the_trainer_or_engine_opens(empty_uri, smollm2_dir, monkeypatch):
    import passband.tasks.steps.rl as rl_tasks
    import passband.tasks.steps.rollout as rollout
    from passband.flows.rl.flow import RLConfig, rl
    from passband.training.engines import EngineConfig

    opened = []
    monkeypatch.setattr(rollout, "open_engine", lambda *args: opened.append("engine"))
    monkeypatch.setattr(rl_tasks, "open_rl_trainer", lambda *args: opened.append("trainer"))
    config = RLConfig(model=str(smollm2_dir), datasets={"ifeval": empty_uri, "code": empty_uri}, eval=None,
                      engine=EngineConfig(kind="hf"))
    with pytest.raises(EmptyTrainingSet) as raised:
        rl(config)
    message = str(raised.value)
    assert "\n" not in message and opened == []
    assert message.startswith("rl: nothing to train on, every dataset is empty: datasets.ifeval (")
    assert message.count("written by the curate run run42") == 2 and "datasets.code (" in message
