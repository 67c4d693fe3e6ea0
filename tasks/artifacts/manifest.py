"""The stored form of an artifact, shared by both store backends: keys, manifests, checksums.

An artifact at key K (e.g. "datasets/curate/3f2a...") under a root is:

    K/manifest.json          written last; its presence is what makes the artifact exist
    K/_v-<hex>/<files...>    the payload, in the version folder the manifest names

A commit uploads a fresh version folder, then writes the manifest in one atomic step
(os.replace on disk, a single PUT on S3), then deletes the folder of the version it replaced.
So a crash before the manifest leaves an orphan version folder that no manifest names (never
read, safe to delete), and an artifact being replaced stays readable, whole, until the new one
is complete. Version folders start with "_", which keys cannot, so they never collide with keys.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from passband.tasks.artifacts.provenance import config_hash

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
CHUNK_BYTES = 1 << 20  # read files 1 MiB at a time: hashing multi-GB checkpoints in bounded memory
_KEY_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")


ARTIFACT_SCHEMES = ("file://", "s3://")
"""URI schemes of artifacts (a local store's file:// root, an S3 store's s3://bucket/prefix)."""


class ArtifactNotFound(LookupError):
    """No manifest at the key: the artifact was never committed (or its commit crashed)."""


class CorruptArtifactError(RuntimeError):
    """A file the manifest lists is missing or has the wrong size or sha256."""


def check_key(key: str) -> str:
    """Return `key` if valid, else raise ValueError naming the bad part.

    Keys are '/'-separated parts of letters, digits and `._=+-`, each starting with a letter or
    digit (so no "..", no absolute paths, no clash with "_v-" version folders or manifest.json).
    """
    bad_parts = [part for part in key.split("/") if not _KEY_PART.fullmatch(part)]
    if bad_parts or key.split("/")[-1] == MANIFEST_NAME:
        raise ValueError(
            f"bad artifact key {key!r}: each '/'-separated part must start with a letter or digit"
            f" and use only letters, digits and ._=+- (bad parts: {bad_parts or [MANIFEST_NAME]})"
        )
    return key


def key_from(key_or_uri: str, root_uri: str) -> str:
    """The key of `key_or_uri`, which is either a key or a full URI under `root_uri`."""
    if key_or_uri.startswith(root_uri.rstrip("/") + "/"):
        return check_key(key_or_uri[len(root_uri.rstrip("/")) + 1 :].rstrip("/"))
    if "://" in key_or_uri:
        raise ValueError(f"{key_or_uri} is not under this store's root {root_uri}")
    return check_key(key_or_uri)


def new_version() -> str:
    """A fresh version folder name; random so concurrent or repeated commits never share one."""
    return f"_v-{uuid.uuid4().hex[:16]}"


def list_files(local_dir: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) of every file under `local_dir`, sorted by relative path."""
    if not local_dir.is_dir():
        raise ValueError(f"artifact source {local_dir} is not a directory")
    # `not is_dir()` rather than `is_file()`: a dangling symlink must fail loudly when read, not
    # be left out of the artifact without a word.
    files = sorted((path.relative_to(local_dir).as_posix(), path)
                   for path in local_dir.rglob("*") if not path.is_dir())
    if not files:
        raise ValueError(f"artifact source {local_dir} holds no files")
    if any(relative == MANIFEST_NAME for relative, _ in files):
        raise ValueError(
            f"artifact source {local_dir} holds a {MANIFEST_NAME}; that name is reserved")
    return files


def hash_file(path: Path, copy_to: Path | None = None) -> dict[str, Any]:
    """{"sha256": hex digest, "size": bytes} of one file, copying it to `copy_to` on the way.

    The copy is fsynced so that a manifest written after it never outlives its data.
    """
    digest = hashlib.sha256()
    size = 0
    with contextlib.ExitStack() as stack:
        reader = stack.enter_context(path.open("rb"))
        writer = None if copy_to is None else stack.enter_context(copy_to.open("wb"))
        while chunk := reader.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
            if writer is not None:
                writer.write(chunk)
        if writer is not None:
            writer.flush()
            os.fsync(writer.fileno())
    return {"sha256": digest.hexdigest(), "size": size}


def build_manifest(*, key: str, version: str, files: dict[str, dict[str, Any]], flow: str,
                   config: dict[str, Any], code_version: str,
                   extra: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest dict: payload checksums plus what produced it (flow, config, code)."""
    return {
        "format_version": FORMAT_VERSION,
        "key": key,
        "version": version,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "flow": flow,
        "config_hash": config_hash(config),
        "config": config,
        "code_version": code_version,
        "extra": extra or {},
        "files": files,
    }


def encode_manifest(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=True).encode()


def decode_manifest(data: bytes, where: str) -> dict[str, Any]:
    """Parse a stored manifest; `where` (its URI) names it in errors."""
    manifest = json.loads(data)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CorruptArtifactError(
            f"{where}: manifest format_version {manifest.get('format_version')!r}, this code reads"
            f" {FORMAT_VERSION}"
        )
    return manifest


def verify_files(manifest: dict[str, Any], directory: Path, where: str) -> None:
    """Check every file the manifest lists against its size and sha256 under `directory`."""
    for relative, expected in manifest["files"].items():
        path = directory / relative
        if not path.is_file():
            raise CorruptArtifactError(
                f"{where}: file {relative} listed in the manifest is missing")
        actual = hash_file(path)
        if actual != expected:
            raise CorruptArtifactError(
                f"{where}: file {relative} fails its checksum: expected sha256 {expected['sha256']}"
                f" ({expected['size']} bytes), found {actual['sha256']} ({actual['size']} bytes)"
            )
