"""The preflight: every data source a config names, opened and its first rows checked, before a run.

`passband config` and `passband run` call it on the resolved config (the same code), so a setup
that would fail when its stage starts fails at once, in one line per problem. The config's own
validation has already checked what needs no file (settings, cross-stage references, that local
paths exist); this reads the files themselves, a few rows each (curation/suites/sniff.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from passband.curation.suites.sniff import Sniff, merge, sniff_problems
from passband.curation.suites.source import ProblemSource
from passband.tasks.artifacts.manifest import ARTIFACT_SCHEMES
from passband.training.sft.config import StageConfig
from passband.training.sft.sources import sniff_chat_file

CHAT_FILE_SUFFIXES = (".jsonl", ".parquet")
"""SFT stage datasets read as local chat files (flows/sft.py: SFTConfig._dataset_problem)."""


def sources_of(config: Any, where: str = "") -> Iterator[tuple[str, ProblemSource | str]]:
    """(dotted setting, source) of every problem source with a path and every SFT chat file in a
    config, nested sections, maps and lists included; each file once, at its first setting."""
    if isinstance(config, ProblemSource):
        if config.path:
            yield where, config
    elif isinstance(config, StageConfig):
        for name in config.datasets:
            if name.endswith(CHAT_FILE_SUFFIXES) and not name.startswith(("@", *ARTIFACT_SCHEMES)):
                yield f"{where}.datasets", name
    elif isinstance(config, BaseModel):
        for name in type(config).model_fields:
            yield from sources_of(getattr(config, name), f"{where}.{name}" if where else name)
    elif isinstance(config, dict):
        for key, value in config.items():
            yield from sources_of(value, f"{where}.{key}")
    elif isinstance(config, list):
        for index, value in enumerate(config):
            yield from sources_of(value, f"{where}.{index}")


def preflight(config: BaseModel) -> Sniff:
    """Every source's problems and notes, each prefixed with the setting that names it."""
    looks, seen = [], set()
    for where, source in sources_of(config):
        key = source if isinstance(source, str) else (source.path, source.task, tuple(source.column_map.items()),
                                                      source.split)
        if key in seen:
            continue
        seen.add(key)
        sniff = (sniff_chat_file(source) if isinstance(source, str) else
                 sniff_problems(source.path, source.task, source.column_map, source.split))
        looks.append(Sniff(problems=[f"{where}: {p}" for p in sniff.problems], notes=[f"{where}: {n}" for n in sniff.notes]))
    return merge(looks)
