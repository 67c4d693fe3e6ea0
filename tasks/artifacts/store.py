"""The artifact store: one small interface, a local-directory backend and an S3 backend.

Every artifact lives under one URI root, picked by `open_store(root_uri)`:
- `file:///abs/path` or a plain path -> `LocalStore` (tasks/artifacts/store_local.py);
- `s3://bucket/prefix` -> `S3Store` via boto3 (tasks/artifacts/store_s3.py), endpoint from the setting
  `s3_endpoint_url` (PASSBAND_S3_ENDPOINT_URL or AWS_ENDPOINT_URL), so MinIO works.

An artifact exists only once its manifest is written, and the manifest is written last (layout and
crash behaviour: tasks/artifacts/manifest.py). Committing an existing key replaces it only after the new
version is complete: readers see the old artifact, whole, until the new manifest lands, and the
new one, whole, after. Readers verify every file's sha256 against the manifest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from passband.tasks.artifacts.manifest import ArtifactNotFound, CorruptArtifactError
from passband.tasks.artifacts.provenance import code_version, config_hash
from passband.tasks.host.settings import StackSettings

__all__ = ["ArtifactNotFound", "ArtifactStore", "CorruptArtifactError", "code_version",
           "artifact_manifest", "config_hash", "fetch_artifact", "open_store"]


class ArtifactStore(Protocol):
    """Stores artifacts by key: '/'-separated, like "datasets/curate/<hash>" or
    "checkpoints/sft/<run>/step-000100"."""

    def commit(self, key: str, local_dir: Path, *, flow: str, config: dict[str, Any],
               code_version: str, extra: dict[str, Any] | None = None) -> str:
        """Store every file under `local_dir` at `key`, manifest last; return the artifact's URI."""
        ...

    def fetch(self, key_or_uri: str, dest: Path | None = None) -> Path:
        """A local directory holding the artifact's files, each checked against its sha256.

        With `dest` the files are copied (downloaded) into `dest`. Without it, a local store
        returns the stored folder itself and an S3 store a folder in its download cache: treat
        both as read-only. Raises ArtifactNotFound (no manifest) or CorruptArtifactError.
        """
        ...

    def exists(self, key: str) -> bool:
        """Whether `key` has a manifest, i.e. a committed artifact."""
        ...

    def manifest(self, key: str) -> dict[str, Any]:
        """The manifest of `key`: files, flow, config, config_hash, code_version, created, extra."""
        ...

    def uri(self, key: str) -> str:
        """The full URI of `key` under this store's root (whether or not it exists)."""
        ...


def open_store(root_uri: str | None = None, settings: StackSettings | None = None) -> ArtifactStore:
    """The store at `root_uri` (default: the `artifact_root` setting)."""
    settings = settings or StackSettings.from_env()
    root_uri = settings.artifact_root if root_uri is None else root_uri
    parsed = urlparse(root_uri)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(
                f"artifact root {root_uri}: an S3 root needs a bucket, s3://bucket/prefix")
        from passband.tasks.artifacts.store_s3 import S3Store

        return S3Store(parsed.netloc, parsed.path.strip("/"), endpoint_url=settings.s3_endpoint_url,
                       cache_dir=settings.cache_dir)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(
                f"artifact root {root_uri}: a file URI needs an absolute path, file:///...")
        from passband.tasks.artifacts.store_local import LocalStore

        return LocalStore(Path(unquote(parsed.path) or "/"))
    if "://" in root_uri:
        raise ValueError(
            f"artifact root {root_uri}: use file:///abs/path, a plain path or s3://bucket/prefix")
    from passband.tasks.artifacts.store_local import LocalStore

    return LocalStore(Path(root_uri).expanduser().resolve())


def fetch_artifact(uri: str, dest: Path | None = None,
                   settings: StackSettings | None = None) -> Path:
    """Fetch the artifact at a full URI (or absolute path), under any root: it is self-contained."""
    store, name = _store_of(uri, settings)
    return store.fetch(name, dest)


def artifact_manifest(uri: str, settings: StackSettings | None = None) -> dict[str, Any]:
    """The manifest of the artifact at a full URI (or absolute path): what produced it."""
    store, name = _store_of(uri, settings)
    return store.manifest(name)


def _store_of(uri: str, settings: StackSettings | None) -> tuple[ArtifactStore, str]:
    """(the store rooted at the URI's parent, the artifact's name in it)."""
    if "://" not in uri and not uri.startswith("/"):
        raise ValueError(f"an artifact needs a full URI or an absolute path, got {uri!r}")
    root_uri, _, name = uri.rstrip("/").rpartition("/")
    root_uri = root_uri or "/"  # "/name": an artifact right under the filesystem root
    return open_store(root_uri, settings), name
