"""RL's default datasets load as they are: `passband run rl` with no preset, and docs/multi-turn.md's
own-environment example (which keeps the defaults), draw them through the flow's own loader. Until
2027-01 the default math set asked difficulty 0's balanced draw for 256 problems, and the draw ran out
after 32 combinatorics problems."""

from __future__ import annotations

import pytest
from prefect.testing.utilities import prefect_test_harness

from passband.curation.hygiene import held_out_keys
from passband.flows.config import resolve_config
from passband.flows.rl.config import RLConfig
from passband.tasks.steps.evaluation import eval_sets_from
from passband.tasks.steps.rl import load_rl_problems


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=300):
        yield


def test_the_default_rl_datasets_load_through_the_flows_loader(harness, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    config = resolve_config(RLConfig, "rl", None, None, [])  # `passband run rl`: the defaults, no preset
    assert config.eval is not None
    eval_sets = eval_sets_from(config.eval.datasets, config.eval.suites)
    held_out = held_out_keys([row["prompt"] for rows in eval_sets.values() for row in rows])
    problems, dropped, empty = load_rl_problems(config.datasets, held_out)
    assert empty == [] and sorted(problems) == sorted(config.datasets)
    for task, source in config.datasets.items():
        assert len(problems[task]) + dropped[task] == source.num_problems, task
        assert len({row["id"] for row in problems[task]}) == len(problems[task]), task
