"""The preflight: every data source a config names, opened and its first rows checked, before a run.

`passband config` and `passband run` call it on the resolved config (the same code), so a setup
that would fail when its stage starts fails at once, in one line per problem. The config's own
validation has already checked what needs no file (settings, cross-stage references, that local
paths exist); this reads the files themselves, a few rows each (curation/suites/sniff.py).

First of all, before a file is read (a row may name a task of the user's, which reading would
import), every use of the user's own code is found, and without PASSBAND_ALLOW_USER_CODE=1 the
config is refused in one line naming them all (`user_code_of`). Likewise a model that ships its own
code (an `auto_map` in its config.json) without its section's `engine.trust_remote_code` (`model_code_of`:
config.json is all it reads).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from passband.curation.catalog.user import OPT_IN, is_import_path, names_user_code, user_code_allowed
from passband.curation.suites.sniff import Sniff, merge, sniff_problems
from passband.curation.suites.source import ProblemSource
from passband.tasks.artifacts.manifest import ARTIFACT_SCHEMES
from passband.tasks.artifacts.model import MODEL_SETTINGS, local_model_dir
from passband.training.engines.config import EngineConfig
from passband.training.episodes.setups import EnvironmentConfig
from passband.training.model_source import model_code_refusal
from passband.training.runtime.config import DistributedConfig
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


TASK_KEYED = ("datasets", "tasks", "rewards", "judges", "environments")
"""Maps whose keys are task names (RL's datasets, curate's tasks, rewards, judges, environments): a key
that is an import path or a `passband.tasks` entry point is a task of the user's code."""


def user_code_of(config: Any, where: str = "", field: str = "") -> Iterator[tuple[str, str]]:
    """(dotted setting, name) of every use of the user's own code in a config, nested sections
    included: a task (a source's `task`, a task-keyed map's key) that is an import path or an entry
    point, a reward function's import path (`rewards`; a reward server's URL runs none), an
    environment's import path."""
    if isinstance(config, EnvironmentConfig):
        yield f"{where}.environment", config.environment
    elif isinstance(config, ProblemSource):
        if config.task and names_user_code(config.task):
            yield f"{where}.task", config.task
    elif isinstance(config, BaseModel):
        for name in type(config).model_fields:
            yield from user_code_of(getattr(config, name), f"{where}.{name}" if where else name, name)
    elif isinstance(config, dict):
        for key, value in config.items():
            if field in TASK_KEYED and names_user_code(key):
                yield f"{where}.{key}", key
            if field == "rewards" and isinstance(value, str) and is_import_path(value):
                yield f"{where}.{key}", value
            yield from user_code_of(value, f"{where}.{key}")
    elif isinstance(config, list):
        for index, value in enumerate(config):
            yield from user_code_of(value, f"{where}.{index}")


def user_code_refusal(config: BaseModel) -> str | None:
    """The one line refusing `config` when it uses the user's code without the opt-in; None otherwise."""
    if user_code_allowed():
        return None
    uses: dict[str, str] = {}  # name -> the first setting that names it
    for where, name in user_code_of(config):
        uses.setdefault(name, where)
    if not uses:
        return None
    named = ", ".join(f"{where}: {name}" for name, where in uses.items())
    return f"your own code would run inside passband's process ({named}): set {OPT_IN}=1 to allow it"


def model_code_of(config: Any, where: str = "") -> Iterator[tuple[str, str, Path]]:
    """(dotted setting, model, its folder) of every model a section names that ships its own code while
    the section's `engine.trust_remote_code` is off, nested sections (a pipeline's stages) included."""
    if not isinstance(config, BaseModel):
        return
    engine = getattr(config, "engine", None)
    if isinstance(engine, EngineConfig) and not engine.trust_remote_code:
        for name in MODEL_SETTINGS:
            ref = getattr(config, name, None)
            model_dir = local_model_dir(ref) if isinstance(ref, str) else None
            if model_dir and model_code_refusal(ref, model_dir):
                yield (f"{where}.{name}" if where else name), ref, model_dir
    for name in type(config).model_fields:
        yield from model_code_of(getattr(config, name), f"{where}.{name}" if where else name)


def model_code_refusals(config: BaseModel) -> list[str]:
    """One line per model that ships code the config did not opt into, naming every setting that names it."""
    settings: dict[str, list[str]] = {}
    folders: dict[str, Path] = {}
    for where, ref, model_dir in model_code_of(config):
        settings.setdefault(ref, []).append(where)
        folders[ref] = model_dir
    return [f"{', '.join(wheres)}: {model_code_refusal(ref, folders[ref])}" for ref, wheres in settings.items()]


def mesh_refusals(config: Any, where: str = "") -> Sniff:
    """Every section whose `distributed.sequence_parallel` does not divide its model's attention heads and KV
    heads (Ulysses hands each rank heads / sp of each: a problem naming the setting), nested sections included;
    a model whose shape is not at hand here is a note (its stage checks again when it loads the model)."""
    from passband.training.model_shapes import model_shape

    if not isinstance(config, BaseModel):
        return Sniff()
    looks = []
    distributed, model = getattr(config, "distributed", None), getattr(config, "model", None)
    if isinstance(distributed, DistributedConfig) and distributed.sequence_parallel > 1 and isinstance(model, str):
        setting = f"{where}.distributed.sequence_parallel" if where else "distributed.sequence_parallel"
        degree, shape = distributed.sequence_parallel, model_shape(model)
        if isinstance(shape, str):
            looks.append(Sniff(notes=[f"{setting}: not checked against the model's heads: {shape}"]))
        elif shape.heads % degree or shape.kv_heads % degree:
            looks.append(Sniff(problems=[f"{setting}: {degree} does not divide {model}'s {shape.heads} attention heads "
                                         f"and {shape.kv_heads} KV heads (Ulysses gives each rank heads / "
                                         f"sequence_parallel of each): pick a common divisor"]))
    for name in type(config).model_fields:
        looks.append(mesh_refusals(getattr(config, name), f"{where}.{name}" if where else name))
    return merge(looks)


def preflight(config: BaseModel) -> Sniff:
    """Every source's problems and notes, each prefixed with the setting that names it; only the
    user-code refusal when there is one (reading the rows would import that code)."""
    refused = user_code_refusal(config)
    if refused:
        return Sniff(problems=[refused])
    models = model_code_refusals(config)
    if models:
        return Sniff(problems=models)
    looks, seen = [mesh_refusals(config)], set()
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
