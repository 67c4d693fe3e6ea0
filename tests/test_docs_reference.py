"""docs/config.md is the config reference the classes generate (infra/cli/config_reference.py)."""

from __future__ import annotations

import difflib
from pathlib import Path

from passband.cli.config_reference import COMMAND, anchor, render_reference
from passband.flows.sft import SFTConfig
from passband.flows.curate.config import SFTSelectionConfig

ROOT = Path(__file__).resolve().parents[1]


def test_committed_reference_matches_the_config_classes() -> None:
    committed = (ROOT / "docs" / "config.md").read_text()
    generated = render_reference()
    drift = "".join(difflib.unified_diff(committed.splitlines(True), generated.splitlines(True),
                                         "docs/config.md", "generated", n=1))
    assert committed == generated, f"docs/config.md is stale; regenerate it with `{COMMAND}`:\n{drift[:3000]}"


def test_reference_lists_every_field_with_its_default_and_docstring() -> None:
    text = render_reference()
    # training/engines/config.py: EngineConfig.memory_fraction, bounds and docstring included
    assert ("- `memory_fraction`: float (> 0, <= 0.95); default `0.3`. vLLM `gpu_memory_utilization` (used when "
            "kv_cache_gib is null): the fraction of device memory (CPU backend: of RAM)") in text
    # RLConfig.engine's default sets two fields; the rest are EngineConfig's
    assert ('- `engine`: [EngineConfig](#training-engines-config-engineconfig); default '
            '`{"kv_cache_gib": "batch", "in_process": true}`.') in text
    # a required field of a Field(description=...) class (training/sft/config.py: StageConfig)
    assert "- `max_length`: int (> 0); default required. Longest packed row in tokens" in text


def test_no_two_config_classes_share_a_name() -> None:
    from passband.cli.config_reference import flow_configs, reachable

    classes = reachable(list(flow_configs().values()))
    names = [cls.__name__ for cls in classes]
    assert sorted({name for name in names if names.count(name) > 1}) == []
    assert (anchor(SFTConfig), anchor(SFTSelectionConfig)) == ("flows-sft-sftconfig", "flows-curate-config-sftselectionconfig")
    text = render_reference()
    assert text.count("### SFTConfig (") == 1 and text.count("### SFTSelectionConfig (") == 1
