"""Configs: pydantic models that double as Prefect flow parameters, presets, and `--set` overrides.

Resolution order, later wins: the model's defaults < the preset file
(`flows/presets/<flow>/<preset>.yaml`) < a user config file (`--config`) < `--set a.b=value`.
Every config model forbids unknown keys, so a typo fails fast with the field's dotted name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

PRESETS_DIR = Path(__file__).parent / "presets"

C = TypeVar("C", bound=BaseModel)


class Config(BaseModel):
    """Base of every config: field docstrings become descriptions (the Prefect UI shows them).

    A partial mapping for a nested config keeps what the field's default chose (over_field_defaults)
    wherever the config is validated: the CLI's layers, a pipeline stage, Prefect UI parameters."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _partial_nested_configs_keep_their_defaults(cls, data: Any) -> Any:
        return over_field_defaults(cls, data) if isinstance(data, dict) else data


class ConfigError(ValueError):
    """A config value, file or override that cannot be used; the message names it."""


def preset_names(flow: str) -> list[str]:
    return sorted(p.stem for p in (PRESETS_DIR / flow).glob("*.yaml"))


def read_preset(flow: str, preset: str) -> dict[str, Any]:
    """A preset's settings. `extends: flow/preset` starts from another preset of the same shape
    (rl/recipe extends rl/demo); `include: {section: other_flow/preset}` places another flow's
    preset under `section` (the pipeline composes its stages' presets this way); the rest of
    the file then overrides both."""
    path = PRESETS_DIR / flow / f"{preset}.yaml"
    if not path.is_file():
        raise ConfigError(f"flow '{flow}' has no preset '{preset}' (available: {', '.join(preset_names(flow))})")
    data = read_yaml(path)
    merged: dict[str, Any] = {}
    if "extends" in data:
        base_flow, _, base_preset = str(data.pop("extends")).partition("/")
        merged = read_preset(base_flow, base_preset)
    for section, ref in (data.pop("include", None) or {}).items():
        other_flow, _, other_preset = str(ref).partition("/")
        merged[section] = read_preset(other_flow, other_preset)
    return deep_merge(merged, data)


def read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Nested dicts merge key by key; any other value in `override` replaces the base value, and
    so does an empty dict (`suites: {}` clears the suites a base preset set)."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and value and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def over_field_defaults(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """`data` merged over the values each nested config's default sets explicitly.

    A field like RLConfig's `engine: EngineConfig = EngineConfig(kv_cache_gib="batch", in_process=True)`
    given as a partial mapping (`--set engine.dtype=float32`, or `engine: {...}` in a preset) would
    otherwise be validated on its own, from EngineConfig's class defaults, and silently lose the
    two values RL chose. Only those explicitly set values are merged (the class defaults come back
    by validation anyway), recursively for configs nested in configs."""
    merged = dict(data)
    for name, field in model.model_fields.items():
        value, default = merged.get(name), field.get_default(call_default_factory=True)
        if isinstance(value, dict) and isinstance(default, BaseModel):
            merged[name] = deep_merge(default.model_dump(mode="json", exclude_unset=True),
                                      over_field_defaults(type(default), value))
    return merged


def parse_override(text: str) -> dict[str, Any]:
    """`a.b.c=value` -> {"a": {"b": {"c": value}}}, value parsed as YAML (numbers, bools, lists)."""
    if "=" not in text:
        raise ConfigError(f"--set expects key=value, got '{text}'")
    dotted, raw = text.split("=", 1)
    if not dotted or any(not part for part in dotted.split(".")):
        raise ConfigError(f"--set has an empty key in '{text}'")
    value: Any = yaml.safe_load(raw) if raw.strip() else ""
    for part in reversed(dotted.split(".")):
        value = {part: value}
    return value


def resolve_config(
    model: type[C], flow: str, preset: str | None = None, config_file: Path | None = None,
    overrides: list[str] = (),
) -> C:
    """Build and validate the config of `flow` from its layers; errors name the bad field."""
    data: dict[str, Any] = {}
    if preset:
        data = deep_merge(data, read_preset(flow, preset))
    if config_file:
        data = deep_merge(data, read_yaml(Path(config_file)))
    for item in overrides:
        data = deep_merge(data, parse_override(item))
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in err.errors()
        )
        raise ConfigError(f"invalid {flow} config: {problems}") from err
