"""`passband config`: the resolved config a run would use, round-trippable; `--schema` with field docs."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from passband.cli.main import FLOWS, load_flow, main
from passband.flows.config import preset_names, resolve_config


@pytest.mark.parametrize("flow", list(FLOWS))
def test_config_output_validates_back_into_the_same_config(flow: str) -> None:
    _, config_cls = load_flow(flow)
    for preset in [None, *preset_names(flow)]:
        args = ["config", flow] + (["--preset", preset] if preset else [])
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        printed = yaml.safe_load(result.stdout)  # notes (e.g. a model not at hand) go to stderr
        # exactly what `passband run` resolves from the same options
        assert config_cls.model_validate(printed) == resolve_config(config_cls, flow, preset)


def test_config_applies_config_file_and_set_overrides(tmp_path) -> None:
    override = tmp_path / "mine.yaml"
    override.write_text("sampling:\n  max_tokens: 17\n")
    result = CliRunner().invoke(main, ["config", "sample", "--preset", "smoke", "--config", str(override),
                                       "--set", "sampling.n=3", "--set", "engine.kind=hf"])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.output)
    assert (printed["sampling"]["max_tokens"], printed["sampling"]["n"], printed["engine"]["kind"]) == (17, 3, "hf")
    # the printed YAML, fed back as --config, resolves to the same config
    saved = tmp_path / "saved.yaml"
    saved.write_text(result.output)
    _, config_cls = load_flow("sample")
    assert resolve_config(config_cls, "sample", config_files=saved).model_dump() == printed


def test_config_rejects_a_bad_setting_like_run_does() -> None:
    result = CliRunner().invoke(main, ["config", "sample", "--set", "sampling.n=zero"])
    assert result.exit_code == 2 and "sampling.n" in result.output


def test_schema_carries_field_docstrings_as_descriptions() -> None:
    result = CliRunner().invoke(main, ["config", "sample", "--schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    assert schema["properties"]["kl_subsample"]["description"] == (
        "Samples re-scored by the fp32 trainer model to measure vllm_kl (0 = skip).")
    assert schema["additionalProperties"] is False  # unknown keys are refused, as in `run`
