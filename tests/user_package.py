"""docs/your-reward.md's package `mypkg`, made in a temp folder and put on sys.path as an installed
distribution (a dist-info folder with the page's entry points), the way `pip install -e .` would.

The page's fenced blocks are found by their info string (```python mypkg/rewards.py, ```toml
pyproject.toml, ...), so the tests run exactly what the page shows.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from doc_blocks import fenced_blocks
from passband.curation.catalog.user import OPT_IN, entry_point_names, load_user_task

PAGE = Path(__file__).resolve().parents[1] / "docs" / "your-reward.md"


def block(info: str) -> str:
    (body,) = [body for kind, body in fenced_blocks(PAGE.read_text()) if kind == info]
    return body


def forget_user_code() -> None:
    """Drop what the process remembers of `mypkg` (modules, entry points, loaded tasks), so the
    next test imports its own copy."""
    for name in [name for name in sys.modules if name == "mypkg" or name.startswith("mypkg.")]:
        del sys.modules[name]
    entry_point_names.cache_clear()
    load_user_task.cache_clear()


def install_user_package(root: Path, monkeypatch: pytest.MonkeyPatch, extra: dict[str, str] | None = None,
                         allow: bool = True) -> Path:
    """The page's mypkg (plus `extra` modules, name -> source) under `root`, importable, its entry
    points installed; PASSBAND_ALLOW_USER_CODE=1 when `allow`. Undone by `forget_user_code`."""
    package = root / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in ("rewards", "tasks"):
        (package / f"{name}.py").write_text(block(f"python mypkg/{name}.py"))
    for name, source in (extra or {}).items():
        (package / f"{name}.py").write_text(source)
    project = tomllib.loads(block("toml pyproject.toml"))["project"]
    info = root / f"{project['name']}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    points = project["entry-points"]["passband.tasks"]
    (info / "entry_points.txt").write_text("[passband.tasks]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    forget_user_code()
    monkeypatch.syspath_prepend(str(root))
    if allow:
        monkeypatch.setenv(OPT_IN, "1")
    else:
        monkeypatch.delenv(OPT_IN, raising=False)
    return root
