"""Configs: pydantic models that double as Prefect flow parameters, presets, and `--set` overrides.

Resolution order, later wins: the model's defaults < the preset file
(`flows/presets/<flow>/<preset>.yaml`) < the user's config files (`--config`, repeatable, merged in
the order given) < `--set a.b=value`. Every config model forbids unknown keys, so a typo fails fast
with the field's dotted name, and a key written twice in one YAML file is an error naming both lines.

Maps of configs (RLConfig.datasets, CurateConfig.tasks, the eval suites, ...), one rule:
- a map written out in a user's config file is the whole map: it replaces the entries of the
  defaults and the preset (so `datasets: {math: ...}` trains on math alone); so does any other
  mapping setting a file writes (`task_weights`, `column_map`);
- `--set` on one entry merges: `--set datasets.math.num_problems=10` keeps `code` and `ifeval`, and
  an entry given partially keeps what its default entry set; a `null` entry removes one
  (`--set datasets.code=null`, in plain maps too: `--set evaluate.datasets.code=null`);
- presets compose by merging (`extends`, `include`), as they always have.
A list entry is set by its index: `--set stages.0.lr=1e-4`.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

PRESETS_DIR = Path(__file__).parent / "presets"

C = TypeVar("C", bound=BaseModel)


class Config(BaseModel):
    """Base of every config: field docstrings become descriptions (the Prefect UI shows them).

    A partial mapping for a nested config keeps what the field's default chose (over_field_defaults)
    wherever the config is validated: the CLI's layers, a pipeline stage, Prefect UI parameters.
    A `null` entry of a map of configs is dropped (`passband config` writes a removed default
    entry so, and it reads back the same way everywhere)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _partial_nested_configs_keep_their_defaults(cls, data: Any) -> Any:
        return without_removed_entries(cls, over_field_defaults(cls, data)) if isinstance(data, dict) else data


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
        # the including flow (the pipeline) sets its stages' models and baselines from its own `model`
        merged[section] = {key: value for key, value in read_preset(other_flow, other_preset).items()
                           if key not in INCLUDING_FLOW_SETS}
    return deep_merge(merged, data)


INCLUDING_FLOW_SETS = ("model", "baseline")
"""Settings of an included preset that the including flow sets itself (pipeline.STAGE_MODELS)."""


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, first_line: int, second_line: int) -> None:
        super().__init__(f"key {key!r} written twice, at lines {first_line} and {second_line} "
                         f"(YAML would keep the second and drop the first without a word): keep one")


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping (`safe_load` keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, typing.Hashable):  # a list as a key: the base loader says what is wrong
                continue
            if key in first_line:
                raise _DuplicateKey(key, first_line[key], key_node.start_mark.line + 1)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def load_yaml(text: str, where: str) -> Any:
    """`text` parsed as YAML; ConfigError on one line, naming `where` and the problem's position."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as err:
        raise ConfigError(f"{where}: {err}") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML{at}: {problem}") from err


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML file's top-level mapping; ConfigError on one line for a file that is not UTF-8 YAML."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not a YAML text file (not UTF-8 at byte {err.start}); "
                          f"a config is a YAML file like `passband config FLOW` prints") from err
    data = load_yaml(text, str(path)) or {}
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


def config_class(annotation: Any) -> type[BaseModel] | None:
    """The config class an annotation holds (`X`, `X | None`, `str | X`), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return next(filter(None, map(config_class, typing.get_args(annotation))), None)
    return None


def entry_class(annotation: Any) -> type[BaseModel] | None:
    """The config class of a map of configs' entries (`dict[str, X]`, `dict[str, str | X]`), or None."""
    if typing.get_origin(annotation) is dict:
        return config_class(typing.get_args(annotation)[1])
    return None


def field_default(model: type[BaseModel], name: str, defaults: BaseModel | None) -> Any:
    """Field `name`'s default: its value in `defaults` (a parent's default instance, like
    PipelineConfig's `rl`) or else the model's own."""
    if defaults is not None:
        return getattr(defaults, name)
    return model.model_fields[name].get_default(call_default_factory=True)


def default_entries(model: type[BaseModel], name: str, defaults: BaseModel | None) -> dict[str, Any]:
    """The default entries of map field `name`, as data to merge over (what each entry set)."""
    return {key: value.model_dump(mode="json", exclude_unset=True) if isinstance(value, BaseModel) else value
            for key, value in (field_default(model, name, defaults) or {}).items()}


def merge_layer(model: type[BaseModel], data: dict[str, Any], layer: dict[str, Any],
                defaults: BaseModel | None = None, whole_maps: bool = False) -> dict[str, Any]:
    """`layer` merged over `data` as deep_merge does, except that a map of configs `data` does not
    hold yet starts from its default entries, so `--set datasets.math.num_problems=10` keeps `code`
    and `ifeval`, and an entry given as a partial mapping keeps what its default entry set. A
    `null` entry stays until validation drops it (without_removed_entries), so a later layer can
    bring it back. `defaults` is the default instance of the section being merged (None: the model's
    own defaults), so the pipeline's `rl` merges over RLConfig's maps as `passband config rl` does.
    `whole_maps` (a user's config file): a map of configs the layer writes out replaces the map.
    A mapping of indices over a list field sets those entries (`--set stages.0.lr=1e-4`)."""
    merged = dict(data)
    for name, value in layer.items():
        field = model.model_fields.get(name)
        base = merged.get(name)
        if field is None or not isinstance(value, dict) or not value:  # unknown (validation names it), a value, or {}
            merged[name] = value
        elif whole_maps and typing.get_origin(field.annotation) is dict:
            merged[name] = value
        elif typing.get_origin(field.annotation) is list and all(isinstance(key, int) for key in value):
            merged[name] = _merge_list_entries(name, base if isinstance(base, list) else
                                               _dumped(field_default(model, name, defaults)), value,
                                               config_class(typing.get_args(field.annotation)[0]))
        elif (entries := entry_class(field.annotation)) is not None:
            fresh = default_entries(model, name, defaults)
            merged[name] = dict(base if isinstance(base, dict) else fresh)
            for key, entry in value.items():
                old = merged[name].get(key)
                old = old if isinstance(old, dict) else fresh.get(key)  # a removed entry or a URI: from the default
                merged[name][key] = (merge_layer(entries, old if isinstance(old, dict) else {}, entry)
                                     if isinstance(entry, dict) and entry else entry)
        elif (section := config_class(field.annotation)) is not None:
            default = field_default(model, name, defaults)
            merged[name] = merge_layer(section, base if isinstance(base, dict) else {}, value,
                                       default if isinstance(default, BaseModel) else None, whole_maps)
        else:
            merged[name] = deep_merge(base, value) if isinstance(base, dict) else value
    return merged


def _dumped(value: Any) -> Any:
    """A default value as data: configs dumped whole, lists entry by entry."""
    if isinstance(value, list):
        return [_dumped(entry) for entry in value]
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _merge_list_entries(name: str, entries: list[Any], by_index: dict[int, Any],
                        entry_model: type[BaseModel] | None) -> list[Any]:
    """`entries` with each `by_index` value merged over (or, for a plain value, replacing) its entry."""
    merged = list(entries)
    for index, value in by_index.items():
        if not 0 <= index < len(merged):
            raise ConfigError(f"{name}.{index}: {name} has {len(merged)} entries (indices 0 to {len(merged) - 1}); "
                              f"write the whole list to add one")
        old = merged[index]
        if isinstance(value, dict) and isinstance(old, dict):
            merged[index] = merge_layer(entry_model, old, value) if entry_model else deep_merge(old, value)
        else:
            merged[index] = value
    return merged


def without_removed_entries(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """`data` without the null entries of its maps (an entry a layer removed): maps of configs, and
    plain maps whose entries cannot be null (`--set evaluate.datasets.code=null`)."""
    return {name: {key: entry for key, entry in value.items() if entry is not None}
            if isinstance(value, dict) and name in model.model_fields
            and _entries_removable(model.model_fields[name].annotation) else value
            for name, value in data.items()}


def _entries_removable(annotation: Any) -> bool:
    """A map field (`dict[str, X]`) whose entries cannot be None, so a null entry means "remove it"."""
    if typing.get_origin(annotation) is not dict:
        return False
    value = typing.get_args(annotation)[1]
    return value is not Any and value is not type(None) and type(None) not in typing.get_args(value)


def dump_with_removed_entries(config: BaseModel, defaults: BaseModel | None = None) -> dict[str, Any]:
    """`config` as data, with `key: null` for each default entry of a map of configs that it lacks,
    so the data layered over the defaults again (`passband run --config`) leaves them out too."""
    data = config.model_dump(mode="json")
    model = type(config)
    for name, field in model.model_fields.items():
        value = getattr(config, name)
        if entry_class(field.annotation) is not None and isinstance(value, dict):
            if name not in data:  # left out of the dump while empty (reward.judges): nothing to remove
                continue
            data[name].update({key: None for key in default_entries(model, name, defaults) if key not in value})
        elif isinstance(value, BaseModel) and config_class(field.annotation) is not None:
            default = field_default(model, name, defaults)
            data[name] = dump_with_removed_entries(value, default if isinstance(default, BaseModel) else None)
    return data


def parse_override(text: str) -> dict[str, Any]:
    """`a.b.c=value` -> {"a": {"b": {"c": value}}}, value parsed as YAML (numbers, bools, lists,
    null); ConfigError on one line for a value that is not YAML."""
    if "=" not in text:
        raise ConfigError(f"--set expects key=value, got '{text}'")
    dotted, raw = text.split("=", 1)
    if not dotted or any(not part for part in dotted.split(".")):
        raise ConfigError(f"--set has an empty key in '{text}'")
    # `@stage.output` (a pipeline reference) is a string, though YAML reserves a leading @
    value: Any = raw if raw.startswith("@") else load_yaml(raw, f"--set {dotted}") if raw.strip() else ""
    for part in reversed(dotted.split(".")):
        value = {int(part) if part.isdigit() else part: value}  # an index into a list: stages.0.lr
    return value


def resolve_config(
    model: type[C], flow: str, preset: str | None = None, config_files: Path | Sequence[Path] | None = None,
    overrides: Sequence[str] = (),
) -> C:
    """Build and validate the config of `flow` from its layers; errors name the bad field, and which
    layer (the preset, a config file, a --set) wrote each setting the error names."""
    files = [config_files] if isinstance(config_files, str | Path) else list(config_files or [])
    layers = [(f"preset {preset}", read_preset(flow, preset), False)] if preset else []
    layers += [(str(path), read_yaml(Path(path)), True) for path in files]
    layers += [(f"--set {item.split('=', 1)[0]}", parse_override(item), False) for item in overrides]
    data: dict[str, Any] = {}
    for _, layer, whole_maps in layers:
        data = merge_layer(model, data, layer, whole_maps=whole_maps)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        origins = setting_origins(model, layers)
        raise ConfigError(f"invalid {flow} config: {validation_problems(err, data, origins)}") from err


def setting_origins(model: type[BaseModel], layers: list[tuple[str, dict[str, Any], bool]]) -> dict[str, str]:
    """Dotted key of every setting the layers (label, data, whole_maps) write -> the label of the last
    layer that wrote it; a map a file writes whole forgets what earlier layers wrote into it."""
    origins: dict[str, str] = {}

    def walk(owner: type[BaseModel] | None, value: Any, key: str, label: str, whole_maps: bool) -> None:
        if not (isinstance(value, dict) and value):
            origins[key] = label
            return
        for name, inner in value.items():
            dotted = f"{key}.{name}" if key else str(name)
            field = owner.model_fields.get(name) if owner is not None and isinstance(name, str) else None
            annotation = field.annotation if field is not None else None
            if whole_maps and typing.get_origin(annotation) is dict:
                for old in [old for old in origins if old == dotted or old.startswith(dotted + ".")]:
                    del origins[old]
            nested = config_class(annotation) if annotation is not None else None
            if nested is None and annotation is not None and (entries := entry_class(annotation)) is not None:
                walk_entries(entries, inner, dotted, label, whole_maps)
                continue
            walk(nested, inner, dotted, label, whole_maps)

    def walk_entries(entries: type[BaseModel], value: Any, key: str, label: str, whole_maps: bool) -> None:
        if not (isinstance(value, dict) and value):
            origins[key] = label
            return
        for name, entry in value.items():
            walk(entries, entry, f"{key}.{name}", label, whole_maps)

    for label, layer, whole_maps in layers:
        walk(model, layer, "", label, whole_maps)
    return origins


def _origin_note(key: str, message: str, origins: dict[str, str]) -> str:
    """Where the settings an error names came from: ` [rl.datasets: from my.yaml; rl.task_weights: from
    preset demo]`, or "" when no layer wrote them (defaults), so a check across settings (a preset's
    value against the user's) is told in the user's terms. A written setting counts when it is the
    error's key or a setting under it that the message names: a field of the key's section by its
    name, or any setting by a dotted name or, at the top level, by the name of a plain setting."""
    prefix = f"{key}." if key else ""
    named = set(re.findall(r"[\w@]+(?:\.[\w@]+)*", message))
    written: dict[str, set[str]] = {}
    for dotted, label in origins.items():
        if dotted == key:
            if label != f"--set {key}":  # the user just wrote it: no need to say so
                written.setdefault(key, set()).add(label)
            continue
        if not dotted.startswith(prefix):
            continue
        parts = dotted[len(prefix):].split(".")
        for length in range(len(parts), 0, -1):
            name = ".".join(parts[:length])
            plain = length > 1 or key or len(parts) == 1  # a section's bare name is too common a word
            if name in named and plain:
                if label != f"--set {prefix + name}":  # the user just wrote it: no need to say so
                    written.setdefault(prefix + name, set()).add(label)
                break
    if not written:
        return ""
    return " [" + "; ".join(f"{name}: from {', '.join(sorted(labels))}" for name, labels in sorted(written.items())) + "]"


def validation_problems(err: ValidationError, data: dict[str, Any], origins: dict[str, str] | None = None) -> str:
    """Each error as `dotted.key: message`, on one line. The key is where the value sits in `data`:
    pydantic's names of union members (`str`, `function-after[...]`) are left out, and so is a union
    member's type mismatch (a mapping is not a string) when another error at that key says more."""
    located = []
    for error in err.errors():
        node, parts = data, []
        for index, part in enumerate(error["loc"]):
            last = index == len(error["loc"]) - 1
            if isinstance(node, dict) and part in node:
                node = node[part]
                parts.append(str(part))
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
                parts.append(str(part))
            elif last and error["type"] == "missing":
                parts.append(str(part))
        located.append((".".join(parts), error))
    telling = [key for key, error in located if not error["type"].endswith("_type")]
    kept = [(key, error) for key, error in located
            if not (error["type"].endswith("_type") and any(k == key or k.startswith(key + ".") for k in telling))]
    return "; ".join(f"{key + ': ' if key else ''}{_message(error)}{_origin_note(key, _message(error), origins or {})}"
                     for key, error in kept)


def _message(error: Any) -> str:
    """A pydantic error's message without the "Value error, " that prefixes a validator's own words."""
    return error["msg"].removeprefix("Value error, ")
