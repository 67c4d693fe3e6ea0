"""What a shard's key hashes beside its rows and settings: the checkpoint's id and the versions of
the source that judges (verifiers) or builds (evaluate) its samples.

A key built from these is stable across runs and processes, so a committed shard is reused by any
later run that would compute the same rows, and an edit to what judges them resamples.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from passband.tasks.artifacts.provenance import config_hash
from passband.tasks.artifacts.store import open_store
from passband.tasks.reporting.registry import TRAINER_FILES

VERIFIER_SOURCES = ("curation/verifiers", "curation/catalog/verify.py", "curation/passrate.py")
REPO_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the four packages


def sources_version(sources: tuple[str, ...]) -> str:
    """12 hex of a sha256 over the given source files and folders (relative to the repo root)."""
    digest = hashlib.sha256()
    for relative in sources:
        path = REPO_ROOT / relative
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(source.relative_to(REPO_ROOT).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(source.read_bytes()).digest())
    return digest.hexdigest()[:12]


@functools.cache
def verifier_version() -> str:
    """12 hex of a sha256 over the verifiers', the grouped verification's and the pass-rate
    arithmetic's source files.

    Narrower than code_version(): editing a flow or a trainer does not invalidate stored shards,
    editing how a sample is judged does.
    """
    return sources_version(VERIFIER_SOURCES)


def checkpoint_id(model_ref: str, model_dir: str) -> str:
    """`<ref>@<16 hex>`: the hex hashes the sha256 of every weight/config/tokenizer file of the checkpoint.

    The trainer's resume state (`TRAINER_FILES`: optimizer, RNG states, data cursor) is left out:
    it does not change what the model generates, and its RNG states differ between two runs that
    train bit-identical weights, which would give their samples different seeds. For a committed
    artifact (the shipped model, an artifact URI) the file hashes come from its manifest, so
    nothing is re-read; for a plain directory the files are hashed here.
    """
    from passband.tasks.artifacts.model import SMOLLM2_KEY
    from passband.training.model_source import SMOLLM2_NAME

    if model_ref == SMOLLM2_NAME:
        files = open_store().manifest(SMOLLM2_KEY)["files"]
    elif model_ref.startswith(("file://", "s3://")):
        root, _, name = model_ref.rstrip("/").rpartition("/")
        files = open_store(root).manifest(name)["files"]
    else:
        files = {path.relative_to(model_dir).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
                 for path in sorted(Path(model_dir).rglob("*")) if path.is_file()}
    model_files = {name: digest for name, digest in files.items() if Path(name).name not in TRAINER_FILES}
    return f"{model_ref}@{config_hash(model_files)[:16]}"
