"""Bad input to the CLI gives one `Error:` line and exit 2, never a traceback; help lists presets,
verify's defaults and exit codes; --version prints the package version."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

from passband.cli.main import FLOWS, main
from passband.flows.config import preset_names

BIN = Path(sys.executable).parent / "passband"


def fails_in_one_line(*args: str) -> str:
    """The one stderr line of `passband ARGS`, which must exit 2 without a traceback."""
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (result.output, result.exception)
    assert "Traceback" not in result.output and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ")
    return line.removeprefix("Error: ")


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"id": "a", "completion": "so 6 x 7 = 42", "reference": "42"}) + "\n")
    return path


def test_a_set_value_that_is_not_yaml() -> None:
    assert fails_in_one_line("config", "curate", "--set", "tasks.math.band=[0.1, 0.5") == (
        "--set tasks.math.band: not valid YAML at line 1, column 10: expected ',' or ']', but got '<stream end>'")


def test_a_config_file_that_is_not_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sampling: {n: 3\nprompts_per_step: [1\n")
    assert fails_in_one_line("config", "rl", "--config", str(bad)) == (
        f"{bad}: not valid YAML at line 2, column 17: expected ',' or '}}', but got ':'")


def test_verify_an_unknown_task(rows: Path, tmp_path: Path) -> None:
    assert fails_in_one_line("verify", "--task", "maths", str(rows), "-o", str(tmp_path / "out.jsonl")) == (
        "--task 'maths': not a catalog task (tasks: math, code, ifeval, structured, proof_grading), a passband.tasks "
        "entry point or an import path module:attribute")


def test_verify_rules_are_the_configs_names(rows: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert fails_in_one_line("verify", "--task", "math", "--rule", "last_number", str(rows), "-o", str(out)) == (
        "math verifier answer_format: Input should be 'plain' or 'boxed' (its settings: answer_format, timeout_s)")
    assert fails_in_one_line("verify", "--task", "code", "--rule", "plain", str(rows), "-o", str(out)) == (
        "the code verifier has no setting answer_format (its settings: extract, limits, max_workers)")
    for rule, status in (("plain", "pass"), ("boxed", "unparsable"), (None, "pass")):  # None: the default, plain
        result = CliRunner().invoke(main, ["verify", "--task", "math", *(["--rule", rule] if rule else []),
                                           str(rows), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert json.loads(out.read_text())["status"] == status, rule


def test_verify_into_a_missing_folder(rows: Path) -> None:
    assert fails_in_one_line("verify", "--task", "math", str(rows), "-o", "/nodir/out.jsonl") == (
        "-o /nodir/out.jsonl: no folder /nodir")


def test_a_real_process_prints_the_one_line_too(tmp_path: Path) -> None:
    result = subprocess.run([str(BIN), "run", "rl", "--set", "sampling={n: 2"], cwd=tmp_path, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin", "PASSBAND_HOME": str(tmp_path / "home")})
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "Error: --set sampling: not valid YAML at line 1, column 6: expected ',' or '}', but got '<stream end>'"]


def test_verify_help_states_its_defaults_quarantine_and_exit_codes() -> None:
    from passband.curation.catalog import TASKS
    from passband.curation.catalog.ifeval import IfevalSettings
    from passband.curation.catalog.math import MathSettings

    text = " ".join(CliRunner().invoke(main, ["verify", "--help"]).output.split())
    assert f"{MathSettings().answer_format} (the last number; the default, as in every flow)" in text
    assert f"{IfevalSettings().mode} (the default, as in every flow)" in text
    assert ".quarantine.jsonl (out.jsonl -> out.quarantine.jsonl)" in text
    assert "3 some rows quarantined" in text
    for task in TASKS:
        assert f" {task} " in text.split("The reference of each task")[1], task


@pytest.mark.parametrize("command", ["run", "config"])
def test_help_lists_the_presets(command: str) -> None:
    for flow in FLOWS:
        text = CliRunner().invoke(main, [command, flow, "--help"]).output
        assert f"Presets (--preset, flows/presets/{flow}/NAME.yaml):" in text
        (listed,) = [line.split() for line in text.splitlines() if line.split()[:1] == [flow]]
        assert listed == [flow, *(f"{name}," for name in preset_names(flow)[:-1]), preset_names(flow)[-1]]
    every = CliRunner().invoke(main, [command, "--help"]).output
    assert {line.split()[0] for line in every.split("Presets")[1].splitlines()[1:] if line.strip()} == set(FLOWS)


def test_version_is_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert (result.exit_code, result.output) == (0, f"passband {version('passband')}\n")


def test_the_recipe_preset_does_not_warn_about_itself():
    """Issue 32 item 5: `passband config rl --preset recipe` printed a warning that its own clip
    range never binds; measured, it binds (scripts/sequence_clip.py), and the warning is gone."""
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run([str(Path(sys.executable).parent / "passband"), "config", "rl", "--preset", "recipe"],
                            capture_output=True, text=True, check=True)
    assert "clip_high: 0.4" in result.stdout
    assert "Warning" not in result.stderr, result.stderr
