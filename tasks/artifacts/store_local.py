"""Artifact store on a local directory (the embedded default); layout in tasks/artifacts/manifest.py."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from passband.tasks.artifacts.manifest import (
    MANIFEST_NAME,
    ArtifactNotFound,
    build_manifest,
    check_key,
    decode_manifest,
    encode_manifest,
    hash_file,
    key_from,
    list_files,
    new_version,
    verify_files,
)


class LocalStore:
    """Artifacts under `root`, an absolute directory (created on first commit)."""

    def __init__(self, root: Path) -> None:
        if not root.is_absolute():
            raise ValueError(f"local artifact root {root} must be an absolute path")
        self.root = root

    def uri(self, key: str) -> str:
        return (self.root / check_key(key)).as_uri()

    def exists(self, key: str) -> bool:
        return (self.root / check_key(key) / MANIFEST_NAME).is_file()

    def manifest(self, key: str) -> dict[str, Any]:
        path = self.root / check_key(key) / MANIFEST_NAME
        if not path.is_file():
            raise ArtifactNotFound(f"no artifact at {self.uri(key)} (no {MANIFEST_NAME})")
        return decode_manifest(path.read_bytes(), self.uri(key))

    def commit(self, key: str, local_dir: Path, *, flow: str, config: dict[str, Any],
               code_version: str, extra: dict[str, Any] | None = None) -> str:
        artifact_dir = self.root / check_key(key)
        version = new_version()
        files = {}
        for relative, source in list_files(local_dir):
            (artifact_dir / version / relative).parent.mkdir(parents=True, exist_ok=True)
            files[relative] = hash_file(source, copy_to=artifact_dir / version / relative)
        previous = self.manifest(key)["version"] if self.exists(key) else None
        manifest = build_manifest(key=key, version=version, files=files, flow=flow, config=config,
                                  code_version=code_version, extra=extra)
        _write_atomically(artifact_dir / MANIFEST_NAME, encode_manifest(manifest))
        if previous is not None:
            shutil.rmtree(artifact_dir / previous)
        return self.uri(key)

    def fetch(self, key_or_uri: str, dest: Path | None = None) -> Path:
        key = key_from(key_or_uri, self.root.as_uri())
        manifest = self.manifest(key)
        stored = self.root / key / manifest["version"]
        if dest is None:
            verify_files(manifest, stored, self.uri(key))
            return stored
        for relative in manifest["files"]:
            (dest / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(stored / relative, dest / relative)
        verify_files(manifest, dest, self.uri(key))  # check the copy the caller will read
        return dest


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `path` so readers see the old content or the new, never a partial file."""
    temporary = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    with temporary.open("wb") as writer:
        writer.write(data)
        writer.flush()
        os.fsync(writer.fileno())
    os.replace(temporary, path)
