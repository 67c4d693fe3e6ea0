"""Stage-level caching: a flow run whose inputs, config and code version were seen before
returns the stored summary instead of recomputing (docs/recipe.md section 1: "a rerun with the same inputs
and code reuses what was already computed").

The key hashes the resolved config (which names every input by URI), the code version, the
versions of the third-party packages that change results (provenance.dependency_versions) and,
where the config leaves a numeric choice to the machine (`auto`), what this machine chose
(`machine_choices`: bf16 and fp32 sample and train other bits); the stored summary is an artifact like any other, committed manifest-last after the outputs, so a
crashed run leaves no summary and is recomputed.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from passband.tasks.artifacts.model import model_code_versions
from passband.tasks.artifacts.provenance import code_version, config_hash, dependency_versions
from passband.tasks.artifacts.store import open_store

SUMMARY_FILE = "summary.json"
AUTO_SETTINGS = frozenset({"dtype", "precision", "device"})
"""Settings whose `auto` the machine decides: engine.dtype, the trainers' precision and device (and a
reward model's device)."""


def _leaves_to_machine(config: Any) -> bool:
    if isinstance(config, dict):
        return any((name in AUTO_SETTINGS and value == "auto") or _leaves_to_machine(value)
                   for name, value in config.items())
    return isinstance(config, list) and any(_leaves_to_machine(value) for value in config)


def machine_choices(config: dict[str, Any]) -> dict[str, bool]:
    """What this machine's `auto` settings are decided by (issue #56): whether torch sees CUDA and
    whether the CPU multiplies bf16 natively. The engine's `dtype: auto` (EngineConfig.resolved_dtype)
    and the trainers' `device`/`precision: auto` (training/runtime/device.py, precision.py) follow from
    these two, and bf16 and fp32 sample and train other bits; so a store shared by an AVX2 box (fp32)
    and an AMX box or a GPU (bf16) keeps a stage of each. A config that names every such setting gets
    {} and the same key on every machine."""
    if not _leaves_to_machine(config):
        return {}
    import torch  # only here: a config without `auto` keys without torch

    return {"cuda": torch.cuda.is_available(), "cpu_native_bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}


def stage_key(flow: str, config: dict[str, Any]) -> str:
    """`stages/<flow>/<config id>`, the id a hash of config + code version + dependency versions
    (+ this machine's choices where the config leaves them `auto`, + the code version of each model that
    ships its own code: an edit to its modeling file retrains)."""
    payload = {"config": config, "code_version": code_version(), "dependencies": dependency_versions()}
    choices = machine_choices(config)
    if choices:
        payload["machine"] = choices
    models = model_code_versions(config)
    if models:  # absent for models without code: their keys stay what they were
        payload["model_code"] = models
    return f"stages/{flow}/{config_hash(payload)[:24]}"


def config_id(key: str) -> str:
    """The config id that ends a `stage_key` (RL names its checkpoints by it)."""
    return key.rsplit("/", 1)[1]


def find_completed(flow: str, resolved: dict[str, Any],
                   run_control: frozenset[str] | set[str] = frozenset({"force"})) -> tuple[str, dict[str, Any] | None]:
    """This config's stage key and, unless its `force` is set, the summary of an identical earlier
    completed run. `run_control` names fields that steer how a run proceeds (force, resume, ...),
    not what it produces: they are left out of the key."""
    key = stage_key(flow, {name: value for name, value in resolved.items() if name not in run_control})
    return key, None if resolved.get("force") else load_cached_summary(key)


def load_cached_summary(key: str) -> dict[str, Any] | None:
    """The summary committed under `key`, or None when this stage has not completed before."""
    store = open_store()
    if not store.exists(key):
        return None
    return json.loads((store.fetch(key) / SUMMARY_FILE).read_text())


def save_summary(key: str, flow: str, config: dict[str, Any], summary: dict[str, Any]) -> str:
    """Commit the stage's summary last, after every output it names is committed."""
    store = open_store()
    with tempfile.TemporaryDirectory(prefix="passband-summary-") as tmp:
        (Path(tmp) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, sort_keys=True))
        # the versions go into the manifest too, so a reader sees what computed the summary
        store.commit(key, Path(tmp), flow=flow, config=config, code_version=code_version(),
                     extra={"dependencies": dependency_versions()})
    return store.uri(key)
