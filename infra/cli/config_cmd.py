"""`passband config`: the resolved config a `passband run` would run, or its JSON schema."""

from __future__ import annotations

import json

import yaml
from pydantic import BaseModel


def render_config(config: BaseModel) -> str:
    """The config as YAML in field order; it validates back into the same config, so it can be
    saved, edited and passed to `passband run --config`. A default entry of a map of configs that
    the config lacks is written as `key: null`, or `--config` would merge it back."""
    from passband.flows.config import dump_with_removed_entries

    return yaml.safe_dump(dump_with_removed_entries(config), sort_keys=False, allow_unicode=True)


def render_schema(config_cls: type[BaseModel]) -> str:
    """The config's JSON schema; each field's docstring is its description."""
    return json.dumps(config_cls.model_json_schema(), indent=2)
