"""The CLI's own example of --set names a field that exists."""

from __future__ import annotations

import re

from click.testing import CliRunner

from passband.cli.main import main
from passband.flows.config import resolve_config
from passband.flows.rl.flow import RLConfig


def test_set_example_in_help_resolves():
    text = CliRunner().invoke(main, ["run", "--help"]).output
    examples = [e for e in re.findall(r"--set\s+(\S+=\S+)", text) if e != "KEY=VALUE"]
    assert examples, text
    config = resolve_config(RLConfig, "rl", overrides=examples)
    assert config.num_iterations == 4 and config.algo.lr == 1e-5
