"""ProblemSource on user data: every row by default (`num_problems: all`), a hub dataset's config
name and split, and a missing local file refused when the config is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from passband.curation.suites import loaders
from passband.curation.suites.source import ProblemSource
from passband.flows.config import ConfigError, resolve_config
from passband.flows.rl.config import RLConfig


def _rows_file(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(count)))
    return path


def _source(path: Path, **fields) -> ProblemSource:
    return ProblemSource(suite=None, path=str(path), task="math", column_map={"question": "prompt", "answer": "reference"},
                         **fields)


def test_a_file_without_num_problems_takes_every_row(tmp_path: Path) -> None:
    path = _rows_file(tmp_path / "mine.jsonl", 40)  # more than the suites' default 32
    source = _source(path)
    assert source.num_problems == "all"
    assert [row["reference"] for row in source.load().rows] == [str(i + 1) for i in range(40)]
    with pytest.warns(UserWarning, match=r"mine.jsonl: taking the first 5 of its 40 good rows \(num_problems: 5; "
                                         r"num_problems: all takes every row\)"):
        assert len(_source(path, num_problems=5).load().rows) == 5
    assert len(_source(path, num_problems="all").load().rows) == 40
    # dumped and validated again (a pipeline stage, Prefect parameters), it stays `all`
    assert ProblemSource.model_validate(source.model_dump()).num_problems == "all"


def test_all_is_refused_for_a_procedural_suite_and_accepted_for_humaneval() -> None:
    with pytest.raises(ValidationError, match="num_problems: all needs a path"):
        ProblemSource(suite="math", num_problems="all")
    assert len(ProblemSource(suite="humaneval", num_problems="all").load().rows) == 164
    assert ProblemSource(suite="math").num_problems == 32  # a suite's default count is unchanged


def test_an_entry_given_a_path_over_a_default_suite_keeps_its_count(tmp_path: Path, monkeypatch) -> None:
    """Documented on the field: --set datasets.math.path=... merges over math's default entry."""
    monkeypatch.chdir(tmp_path)
    _rows_file(tmp_path / "mine.jsonl", 3)
    over = ["datasets.math.path=mine.jsonl", "datasets.math.task=math"]
    assert resolve_config(RLConfig, "rl", None, None, over).datasets["math"].num_problems == 160
    every = resolve_config(RLConfig, "rl", None, None, [*over, "datasets.math.num_problems=all"])
    assert every.datasets["math"].num_problems == "all"


def test_a_hub_dataset_is_loaded_with_its_config_name_and_split(tmp_path: Path, monkeypatch) -> None:
    import datasets

    calls = []

    def load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        return datasets.Dataset.from_list([{"question": "What is 1 + 1?", "answer": "2"},
                                           {"question": "What is 2 + 2?", "answer": "4"}])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.chdir(tmp_path)  # so "openai/gsm8k" is no local folder
    gsm8k = _source(Path("openai/gsm8k"), name="main", split="test")
    assert [row["reference"] for row in gsm8k.load().rows] == ["2", "4"]
    assert [row["id"] for row in gsm8k.load().rows] == ["openai/gsm8k-1", "openai/gsm8k-2"]
    with pytest.warns(UserWarning, match="someone/plain: taking the first 1 of its 2 good rows"):
        assert _source(Path("someone/plain"), num_problems=1).load().rows[0]["reference"] == "2"
    assert calls == [("openai/gsm8k", "main", "test"), ("openai/gsm8k", "main", "test"),
                     ("someone/plain", None, "train")]


def test_a_missing_local_file_fails_when_the_config_is_read(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as error:
        resolve_config(RLConfig, "rl", None, None, ["datasets.math.path=data/absent.jsonl"])
    assert str(error.value) == (f"invalid rl config: datasets.math.path: no such file "
                                f"or folder: data/absent.jsonl (relative to {tmp_path}); "
                                f"for a hub dataset write path: hub:data/absent.jsonl")
    assert "\n" not in str(error.value)
    for missing in ("./folder", "/nowhere/data", "x.parquet", "x.ndjson"):
        with pytest.raises(ValidationError, match=f"no such file or folder: {missing}"):
            ProblemSource(path=missing, task="math")
    assert not loaders.missing_local_file("openai/gsm8k")  # a hub name is checked when it is loaded
