"""Weights by version on disk: the trainer publishes `v<iteration>` after each update, rollout
engines load the newest in place. The in-process RL sync is the same path with one version kept,
and so are the torchrun ranks (rank 0 publishes the full state dict they gathered: publish_state_dict).

Layout under a root directory:

    <root>/v<N>/model-0000k.safetensors   the policy in the engine's dtype (engine_dtype.py)
    <root>/v<N>/manifest.json             written last: until it is there, v<N> does not exist

The manifest is written to a temporary name and renamed (os.replace, atomic on one filesystem),
so a reader sees a version whole or not at all, and a publisher killed halfway leaves a folder no
reader returns (the next publish deletes it). Readers also check each shard's size against the
manifest. Shards are not fsynced: a killed process cannot tear a version, a power cut could, and
the next update publishes a fresh one anyway.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from passband.training.engines.protocol import RolloutEngine
from passband.training.lora.adapters import merged_state, write_adapter
from passband.training.weights.engine_dtype import engine_tensors, head_name, write_shards

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
_VERSION_DIR = re.compile(r"v(\d+)")


def publish_version(model: torch.nn.Module, root: Path, version: int, dtype: str, lm_head_fp32: bool,
                    keep: int = 2, adapter_only: bool = False) -> Path:
    """`publish_state_dict` of `model`'s own weights (the in-process trainer's; LoRA adapters merged into
    them: training/lora/adapters.py merged_state); the version's folder. With `adapter_only` (LoRA's
    engine_weights 'adapter') the version holds the adapters alone, in peft's layout, which an engine
    serving LoRA applies to its base (training/engines/lora_serving.py)."""
    if adapter_only:
        return _commit(root, version, keep, lambda target: write_adapter(model, target, "policy"),
                       {"dtype": "float32", "adapter": True})
    return publish_state_dict(merged_state(model), head_name(model), root, version, dtype, lm_head_fp32, keep)


def publish_state_dict(state: Mapping[str, torch.Tensor], head: str, root: Path, version: int, dtype: str,
                       lm_head_fp32: bool, keep: int = 2) -> Path:
    """Write the weights `state` (a model's state dict, or the full one rank 0 gathered from the
    torchrun ranks; `head`: the output projection's name, engine_dtype.head_name) as
    `<root>/v<version>` in the engine's `dtype` (EngineConfig.dtype; an fp32 head when
    `lm_head_fp32`), manifest last, then delete every version older than the `keep` newest; the
    version's folder. A resumed run redoing iteration `version` replaces it and deletes every newer
    version (they come from the iterations it rolled back, and a reader would take the newest),
    each unpublished (manifest first) before its shards go."""
    tensors = engine_tensors(state, head, getattr(torch, dtype), lm_head_fp32)
    return _commit(root, version, keep, lambda target: write_shards(tensors, target),
                   {"dtype": dtype, "lm_head_fp32": lm_head_fp32})


def _commit(root: Path, version: int, keep: int, write: Callable[[Path], dict[str, int]],
            described: dict[str, object]) -> Path:
    """`write(target)` the files of `<root>/v<version>` (it returns {file name: bytes}), then its manifest
    (with `described`) last, as `publish_state_dict` says; the version's folder."""
    if keep < 1:
        raise ValueError(f"publish_state_dict: keep={keep}; keep at least the version being published (1)")
    for stale in [v for v in _version_folders(root) if v >= version]:
        _remove(root, stale)
    target = root / f"v{version}"
    files = write(target)
    manifest = {"format_version": FORMAT_VERSION, "version": version, **described, "files": files}
    partial = target / f".{MANIFEST}.partial"
    partial.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    os.replace(partial, target / MANIFEST)
    collect_garbage(root, keep)
    return target


def committed_versions(root: Path) -> list[int]:
    """The versions under `root` that have their manifest, oldest first."""
    return [version for version in _version_folders(root) if (root / f"v{version}" / MANIFEST).is_file()]


def newest_version(root: Path) -> int | None:
    """The newest committed version under `root`, or None when there is none yet."""
    versions = committed_versions(root)
    return versions[-1] if versions else None


def version_dir(root: Path, version: int) -> Path:
    """The folder of committed version `version`, its shards checked against the manifest's sizes."""
    path = root / f"v{version}"
    if not (path / MANIFEST).is_file():
        raise FileNotFoundError(f"weights version v{version} under {root} is not published (no {MANIFEST})")
    manifest = json.loads((path / MANIFEST).read_text())
    for name, size in manifest["files"].items():
        found = (path / name).stat().st_size if (path / name).is_file() else None
        if found != size:
            raise FileNotFoundError(f"weights version v{version} under {root}: {name} has {found} bytes, "
                                    f"its manifest says {size}")
    return path


def load_version(engine: RolloutEngine, root: Path, version: int) -> None:
    """Load committed version `version` into `engine` in place."""
    engine.load_weights(version_dir(root, version))


def load_newest(engine: RolloutEngine, root: Path, loaded: int | None) -> int | None:
    """Load the newest committed version into `engine` when it is newer than `loaded` (the version
    the engine holds; None: none yet); the version the engine holds afterwards."""
    newest = newest_version(root)
    if newest is None or (loaded is not None and newest <= loaded):
        return loaded
    load_version(engine, root, newest)
    return newest


def collect_garbage(root: Path, keep: int) -> list[int]:
    """Delete every version folder under `root` older than the `keep` newest committed versions,
    unfinished ones (no manifest) included; the versions deleted, oldest first."""
    committed = committed_versions(root)
    if len(committed) <= keep:
        return []
    removed = [version for version in _version_folders(root) if version < committed[-keep]]
    for version in removed:
        _remove(root, version)
    return removed


def _version_folders(root: Path) -> list[int]:
    """Every v<N> folder under `root`, committed or not, oldest first."""
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for m in (_VERSION_DIR.fullmatch(p.name) for p in root.iterdir()) if m)


def _remove(root: Path, version: int) -> None:
    """Unpublish v<version> (its manifest first, so no reader sees it half-deleted), then delete it."""
    (root / f"v{version}" / MANIFEST).unlink(missing_ok=True)
    shutil.rmtree(root / f"v{version}")
