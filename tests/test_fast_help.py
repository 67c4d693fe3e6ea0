"""`passband --help` and `passband config FLOW` print without importing torch (~2 s of a YAML print).

Each runs in a fresh interpreter, so nothing another test imported counts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from passband.cli.main import FLOWS

PROBE = """
import contextlib, io, sys
from passband.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main({argv!r})
    except SystemExit as stop:
        assert stop.code in (0, None), stop.code
assert out.getvalue().strip(), "printed nothing"
print(sorted(name for name in sys.modules if name == "torch" or name.startswith(("torch.", "vllm", "transformers"))))
"""


@pytest.mark.parametrize("argv", [["--help"], *(["config", flow] for flow in FLOWS)], ids=" ".join)
def test_help_and_config_import_no_torch(argv: list[str]) -> None:
    result = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"
