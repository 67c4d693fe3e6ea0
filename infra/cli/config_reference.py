"""docs/config.md: every flow's config, field by field, generated from the config classes.

    python -m passband.cli.config_reference > docs/config.md

Each config class reachable from a flow's config (through its fields' types: nested configs,
`dict[str, X]`, `list[X]`, `X | None`) gets one section, in the order a depth-first walk of the
flows meets them: its docstring, then per field the type (with its bounds), the default and the
field's docstring. The text is what pydantic reads from the classes, so it is what `passband
config FLOW --schema` says, in prose; tests/test_docs_reference.py fails when the committed file drifts.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any, NamedTuple

import annotated_types
from pydantic import BaseModel, ConfigDict, create_model
from pydantic.fields import FieldInfo

COMMAND = "python -m passband.cli.config_reference > docs/config.md"
# annotated_types constraint -> how the reference writes it
BOUNDS = {annotated_types.Ge: (">=", "ge"), annotated_types.Gt: (">", "gt"), annotated_types.Le: ("<=", "le"),
          annotated_types.Lt: ("<", "lt"), annotated_types.MinLen: ("min length", "min_length"),
          annotated_types.MaxLen: ("max length", "max_length")}


def flow_configs() -> dict[str, type[BaseModel]]:
    """Flow name -> its config class, in the CLI's order."""
    from passband.cli.main import FLOWS

    return {name: getattr(importlib.import_module(module), config_name)
            for name, (module, _, config_name) in FLOWS.items()}


class FieldDoc(NamedTuple):
    """One field as the reference lists it."""

    name: str
    annotation: Any
    default: str
    bounds: list[str]
    description: str


def is_config_class(annotation: Any) -> bool:
    """A pydantic model or a dataclass (the code sandbox's limits are one) that a config nests."""
    return isinstance(annotation, type) and (issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation))


def config_fields(cls: type) -> list[FieldDoc]:
    """The fields of a config class, in definition order."""
    if issubclass(cls, BaseModel):
        return [FieldDoc(name, field.annotation, default_text(field), bound_texts(field), one_line(field.description))
                for name, field in cls.model_fields.items()]
    # A plain dataclass: pydantic reads its attribute docstrings the way it reads a model's when a
    # model that reads docstrings holds it (as CodeTaskSettings holds SandboxLimits).
    holder = create_model("Holder", __config__=ConfigDict(use_attribute_docstrings=True), value=(cls, ...))
    schema = holder.model_json_schema()["$defs"][cls.__name__]
    hints = typing.get_type_hints(cls)
    return [FieldDoc(field.name, hints[field.name], f"`{json.dumps(field.default)}`", [],
                     one_line(schema["properties"][field.name].get("description")))
            for field in dataclasses.fields(cls)]


def nested_configs(annotation: Any) -> Iterator[type]:
    """The config classes inside a field's annotation, in the order they appear."""
    if is_config_class(annotation):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from nested_configs(arg)


def reachable(roots: list[type[BaseModel]]) -> list[type]:
    """Every config class reachable from `roots`, depth first in field order, each once."""
    seen: list[type] = []

    def visit(cls: type) -> None:
        if cls in seen:
            return
        seen.append(cls)
        for field in config_fields(cls):
            for nested in nested_configs(field.annotation):
                visit(nested)

    for root in roots:
        visit(root)
    return seen


def source_path(cls: type) -> str:
    """The file that defines `cls`, relative to the repository root (`passband.flows.x` -> flows/x.py)."""
    module = sys.modules[cls.__module__]
    path = cls.__module__.removeprefix("passband.").replace(".", "/")
    return f"{path}/__init__.py" if module.__file__.endswith("__init__.py") else f"{path}.py"


def anchor(cls: type) -> str:
    """The HTML id of `cls`'s section: unique even if two classes shared a name (tests/test_docs_reference.py keeps them apart)."""
    return f"{cls.__module__.removeprefix('passband.')}.{cls.__qualname__}".replace(".", "-").lower()


def type_text(annotation: Any) -> str:
    """A field's type as the reference writes it: `int`, `"vllm" | "hf"`, `dict[str, ProblemSource]`."""
    if annotation is type(None):
        return "null"
    if is_config_class(annotation):
        return f"[{annotation.__name__}](#{anchor(annotation)})"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        bounds = [text for item in args[1:] for text in bound_texts(item)]
        return type_text(args[0]) + (f" ({', '.join(bounds)})" if bounds else "")
    if origin is typing.Literal:
        return " | ".join(json.dumps(value) for value in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_text(arg) for arg in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def bound_texts(item: Any) -> list[str]:
    """`>= 1`, `<= 0.95`, ... of one Annotated item or one field's metadata entry."""
    if isinstance(item, FieldInfo):
        return [text for inner in item.metadata for text in bound_texts(inner)]
    for kind, (symbol, attribute) in BOUNDS.items():
        if isinstance(item, kind):
            return [f"{symbol} {getattr(item, attribute)}"]
    return []


def default_text(field: FieldInfo) -> str:
    """The default as JSON; a nested config shows only the fields it sets (the rest are its class's)."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel) and not value.model_fields_set:
        return "its class's"
    return f"`{json.dumps(jsonable(value), ensure_ascii=False)}`"


def jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if dataclasses.is_dataclass(value):
        return {}  # as a model's: a dataclass default built with no arguments sets nothing
    return value


def one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def class_section(cls: type) -> list[str]:
    fields = []
    for field in config_fields(cls):
        kind = type_text(field.annotation) + (f" ({', '.join(field.bounds)})" if field.bounds else "")
        fields.append(f"- `{field.name}`: {kind}; default {field.default}."
                      + (f" {field.description}" if field.description else ""))
    return [f'<a id="{anchor(cls)}"></a>', "", f"### {cls.__name__} (`{source_path(cls)}`)", "",
            one_line(cls.__doc__), "", *fields, *([""] if fields else [])]


def render_reference() -> str:
    """The whole of docs/config.md."""
    from passband.curation.catalog import TASKS

    configs = flow_configs()
    lines = [
        "# Config reference",
        "",
        f"Generated from the config classes by `{COMMAND}`; do not edit by hand",
        "(tests/test_docs_reference.py fails when this file and the classes disagree).",
        "",
        "Settings resolve as the class defaults < a preset (`--preset NAME`, `flows/presets/FLOW/NAME.yaml`)",
        "< a YAML file (`--config FILE`) < `--set dotted.key=value`; `passband config FLOW ...` prints the",
        "result. Nested configs are set by dotted keys (`--set engine.dtype=float32`) or as YAML mappings;",
        "a mapping given for a nested config keeps the fields it does not name. Unknown keys are refused.",
        "A nested config's default below shows only the fields it sets; the others take that class's defaults.",
        "",
        "## Flows",
        "",
        *(f"- `{name}`: [{cls.__name__}](#{anchor(cls)})" for name, cls in configs.items()),
        "",
        "## Config classes",
        "",
    ]
    for cls in reachable(list(configs.values())):
        lines += class_section(cls)
    lines += ["## Suite options", "",
              "`ProblemSource.options` of a built-in suite, by task (`options: {balanced: false}` for math).", ""]
    for name, task in TASKS.items():
        lines += [f"- `{name}`: [{task.SuiteOptions.__name__}](#{anchor(task.SuiteOptions)})"]
    lines.append("")
    for cls in reachable([task.SuiteOptions for task in TASKS.values()]):
        lines += class_section(cls)
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_reference())
