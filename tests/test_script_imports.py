"""Every `from passband... import name` in scripts/ names something that exists.

The scripts import inside their functions (so `--help` stays fast), where neither pyflakes (tests/test_names.py)
nor an import of the script reaches: scripts/compare_muon_sft.py still imported `EvaluateConfig` from the module
it had left, and died on it after 25 minutes of training, at its evaluation step.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def passband_imports(source: str) -> set[tuple[str, str]]:
    """(module, name) of every `from passband.x import name` anywhere in `source`, function bodies included."""
    return {(node.module, alias.name) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("passband.")
            for alias in node.names}


def resolves(module: str, name: str) -> bool:
    """Whether `from module import name` would succeed: an attribute of the module, or a submodule of it."""
    imported = importlib.import_module(module)
    is_package = hasattr(imported, "__path__")
    return hasattr(imported, name) or (is_package and importlib.util.find_spec(f"{module}.{name}") is not None)


def test_the_check_reads_imports_inside_functions() -> None:
    source = "def f():\n    from passband.training.heap import use_heap, not_there\n"
    assert passband_imports(source) == {("passband.training.heap", "use_heap"), ("passband.training.heap", "not_there")}
    assert resolves("passband.training.heap", "use_heap") and not resolves("passband.training.heap", "not_there")


def test_every_script_imports_names_that_exist() -> None:
    missing = sorted(f"{path.name}: from {module} import {name}"
                     for path in sorted(SCRIPTS.glob("*.py"))
                     for module, name in passband_imports(path.read_text())
                     if not resolves(module, name))
    assert not missing, "\n".join(missing)
