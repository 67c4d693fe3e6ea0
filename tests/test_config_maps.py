"""Maps of configs (RLConfig.datasets, CurateConfig.tasks, the eval suites, ...) merge a layer over
their default entries and drop a `null` entry, in every flow, with and without a preset.

The maps are found by walking the configs, not listed by hand; each expectation is computed by
editing the resolved config's dump and validating it, independently of the layering code."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel, ValidationError

from passband.cli.main import FLOWS, load_flow, main
from passband.flows.config import ConfigError, config_class, entry_class, preset_names, resolve_config

CASES = [(flow, preset) for flow in FLOWS for preset in [None, *preset_names(flow)]]


def config_maps(config: BaseModel, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], dict[str, Any]]:
    """Dotted path -> value of every non-empty map of configs in `config`, nested sections included."""
    found = {}
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        if entry_class(field.annotation) is not None and isinstance(value, dict) and value:
            found[(*path, name)] = value
        elif isinstance(value, BaseModel) and config_class(field.annotation) is not None:
            found.update(config_maps(value, (*path, name)))
    return found


def map_fields(model: type[BaseModel], seen: set | None = None) -> set[tuple[str, str]]:
    """(class, field) of every map of configs reachable from `model`'s annotations."""
    seen = set() if seen is None else seen
    found = set()
    for name, field in model.model_fields.items():
        if entry_class(field.annotation) is not None:
            found.add((model.__name__, name))
        for nested in (entry_class(field.annotation), config_class(field.annotation)):
            if nested is not None and nested not in seen:
                seen.add(nested)
                found |= map_fields(nested, seen)
    return found


def int_paths(entry: BaseModel, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], int]]:
    """(path, value) of every int setting of an entry, nested configs included."""
    found = []
    for name in type(entry).model_fields:
        value = getattr(entry, name)
        if type(value) is int:
            found.append(((*path, name), value))
        elif isinstance(value, BaseModel):
            found += int_paths(value, (*path, name))
    return found


def edited(config: BaseModel, path: tuple[str, ...], value: Any = None, remove: bool = False) -> BaseModel:
    """The config validated from its dump with one value set, or one map entry removed."""
    data = config.model_dump(mode="json")
    node = data
    for part in path[:-1]:
        node = node[part]
    if remove:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return type(config).model_validate(data)


def resolve(flow: str, preset: str | None, *overrides: str) -> BaseModel:
    return resolve_config(load_flow(flow)[1], flow, preset, None, list(overrides))


@pytest.mark.parametrize(("flow", "preset"), CASES)
def test_a_set_on_one_entry_keeps_the_other_entries_and_fields(flow: str, preset: str | None) -> None:
    base = resolve(flow, preset)
    for path, entries in config_maps(base).items():
        configs = [(k, e) for k, e in entries.items() if isinstance(e, BaseModel)]
        if not configs:  # every entry a URI (the pipeline's `@stage.output`s): replace one
            key = sorted(entries)[0]
            full = (*path, key)
            assert resolve(flow, preset, f"{'.'.join(full)}=file:///elsewhere") == \
                edited(base, full, "file:///elsewhere"), (flow, preset, full)
            continue
        key, entry = configs[0]
        for setting, value in int_paths(entry):
            full = (*path, key, *setting)
            try:
                expected = edited(base, full, value + 1)
            except ValidationError:
                continue  # that setting has an upper bound or a cross-check; try the next
            assert resolve(flow, preset, f"{'.'.join(full)}={value + 1}") == expected, (flow, preset, full)
            break
        else:
            raise AssertionError(f"{flow}/{preset}: no int setting of {'.'.join(path)}.{key} to override")


@pytest.mark.parametrize(("flow", "preset"), CASES)
def test_a_null_entry_removes_it_and_stays_removed_through_passband_config(flow: str, preset: str | None) -> None:
    base = resolve(flow, preset)
    for path, entries in config_maps(base).items():
        if len(entries) < 2:
            continue
        key = sorted(entries)[-1]
        try:
            expected = edited(base, (*path, key), remove=True)
        except ValidationError:
            continue  # a cross-check needs the entry (e.g. best_metric names it)
        removal = f"{'.'.join((*path, key))}=null"
        config = resolve(flow, preset, removal)
        assert config == expected and key not in config_maps(config)[path], (flow, preset, removal)
        # the printed config, passed back with --config, leaves the entry out too
        args = ["config", flow, *(["--preset", preset] if preset else []), "--set", removal]
        printed = CliRunner().invoke(main, args)
        assert printed.exit_code == 0, printed.output
        assert yaml.safe_load(printed.stdout) is not None
        saved = _saved(printed.stdout)
        assert resolve_config(load_flow(flow)[1], flow, None, saved) == expected, (flow, preset, removal)


def _saved(text: str):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "config.yaml"
    path.write_text(text)
    return path


def test_every_map_of_configs_is_exercised_above() -> None:
    """The cases above reach every map of configs whose default has entries (an empty default,
    like SFTConfig.held_out or the judges, has nothing to merge over)."""
    reached = set()
    declared = set()
    for flow, preset in CASES:
        config = resolve(flow, preset)
        declared |= map_fields(type(config))
        for path in config_maps(config):
            owner = config
            for part in path[:-1]:
                owner = getattr(owner, part)
            reached.add((type(owner).__name__, path[-1]))
    empty_by_default = {("SFTConfig", "held_out"), ("RewardConfig", "judges"), ("EvalConfig", "judges"),
                        ("EvaluateConfig", "judges"), ("VerifierSettings", "rewards"), ("RLConfig", "environments"),
                        ("EvaluateConfig", "environments"), ("CurateConfig", "environments"),
                        ("RewardConfig", "overlong_tasks")}
    assert empty_by_default | reached == declared
    assert {("RLConfig", "datasets"), ("CurateConfig", "tasks"), ("EvaluateConfig", "suites"),
            ("EvalConfig", "suites"), ("SFTConfig", "generated")} <= reached


def test_the_issue_examples() -> None:
    rl = resolve("rl", None, "datasets.math.num_problems=10")
    assert {k: v.num_problems for k, v in rl.datasets.items()} == {"math": 10, "code": 128, "ifeval": 128}
    curate = resolve("curate", None, "tasks.structured.source.suite=structured")
    assert sorted(curate.tasks) == ["code", "ifeval", "math", "structured"]
    assert curate.tasks["structured"].source.num_problems == 32  # a new entry starts from the class defaults
    curate = resolve("curate", None, "tasks.math.enabled=false")
    assert (curate.tasks["math"].enabled, curate.tasks["math"].source.num_problems, sorted(curate.pools())) == \
        (False, 40, ["code", "ifeval"])


def test_a_section_merges_over_its_flows_default_values() -> None:
    """SFT's eval is an EvalConfig with SFT's own default values (boxed math, seed 1000); given as a
    mapping it starts from those, not from EvalConfig's, so adding a code suite keeps the math one."""
    sft = resolve("sft", None, "eval.suites.code.suite=code")
    assert sorted(sft.eval.suites) == ["code", "math"]
    assert (sft.eval.suites["math"].seed, sft.eval.suites["code"].seed) == (1000, 0)


def test_an_entry_removed_then_set_again_starts_from_its_default() -> None:
    rl = resolve("rl", None, "datasets.code=null", "datasets.code.seed=3")
    assert (rl.datasets["code"].suite, rl.datasets["code"].num_problems, rl.datasets["code"].seed) == ("code", 128, 3)


def test_an_empty_map_still_clears_and_a_uri_still_replaces() -> None:
    pipeline = resolve("pipeline", "smoke")
    assert pipeline.evaluate.suites == {}  # the preset's `suites: {}`
    rl = resolve("rl", None, "datasets.math=file:///tmp/rl_math")
    assert rl.datasets["math"] == "file:///tmp/rl_math" and sorted(rl.datasets) == ["code", "ifeval", "math"]
    with pytest.raises(ConfigError, match=r"give at least one eval set in datasets or suites \(or set eval: null\)"):
        resolve("rl", None, "eval.suites={}")


def test_a_removed_entry_stays_removed_through_prefect_parameters_and_pipeline_stages() -> None:
    """Prefect validates a run's JSON parameters, and the pipeline each stage's dump, without the
    CLI's layering: a map there is taken as given, so a removed entry does not come back."""
    from passband.flows.rl.flow import rl

    config = resolve("rl", None, "datasets.code=null", "eval.suites.ifeval=null")
    parameters = rl.validate_parameters({"config": config.model_dump(mode="json")})["config"]
    assert (sorted(parameters.datasets), sorted(parameters.eval.suites)) == (["ifeval", "math"], ["code", "math"])
    # RL and the evaluations read curate's code outputs: they drop them too (the pipeline refuses a
    # reference to an output no stage will make)
    pipeline = resolve("pipeline", "smoke", "curate.tasks.code=null", "rl.datasets.code=null",
                       "rl.eval.datasets.code=null", "evaluate.datasets.code=null")
    assert "code" not in pipeline.evaluate.datasets and "code" not in pipeline.rl.eval.datasets
    stage = type(pipeline.curate).model_validate(pipeline.curate.model_dump(mode="json"))
    assert sorted(stage.tasks) == ["ifeval", "math"]
