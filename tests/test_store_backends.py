"""The artifact-store contract, run against both backends: a local directory and S3.

S3 is a real S3 API over HTTP: moto in server mode on 127.0.0.1, reached by boto3 through
PASSBAND_S3_ENDPOINT_URL exactly as MinIO would be; nothing in boto3 is patched.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from passband.tasks.artifacts.store import ArtifactNotFound, ArtifactStore, CorruptArtifactError, open_store
from passband.tasks.host.settings import StackSettings

BUCKET = "passband-test"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}
KEY = "datasets/curate/abc123"
CONFIG = {"seed": 7, "bands": [0.2, 0.8], "name": "smoke"}


@dataclass
class Backend:
    """A store plus raw access to what it stored, for inspecting and damaging it from outside."""

    store: ArtifactStore
    list_stored: Callable[[str], list[str]]  # key -> sorted paths stored under it, relative to it
    overwrite: Callable[[str, str, bytes], None]  # (key, path relative to key, new bytes)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with socket.socket() as probe:  # ask the OS for a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


def _local_backend(tmp_path: Path) -> Backend:
    root = tmp_path / "artifacts"

    def list_stored(key: str) -> list[str]:
        return sorted(p.relative_to(root / key).as_posix() for p in (root / key).rglob("*") if p.is_file())

    def overwrite(key: str, relative: str, data: bytes) -> None:
        (root / key / relative).write_bytes(data)

    return Backend(open_store(root.as_uri()), list_stored, overwrite)


def _s3_backend(tmp_path: Path, endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Backend:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PASSBAND_S3_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))  # the download cache goes here
    prefix = f"runs/{tmp_path.name}"  # one prefix per test keeps tests apart in the shared bucket
    client = boto3.client("s3", endpoint_url=endpoint)

    def list_stored(key: str) -> list[str]:
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/{key}/").get("Contents", [])
        return sorted(item["Key"].removeprefix(f"{prefix}/{key}/") for item in listed)

    def overwrite(key: str, relative: str, data: bytes) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}/{relative}", Body=data)

    store = open_store(f"s3://{BUCKET}/{prefix}", StackSettings.from_env())
    return Backend(store, list_stored, overwrite)


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Backend:
    if request.param == "local":
        return _local_backend(tmp_path)
    return _s3_backend(tmp_path, request.getfixturevalue("s3_endpoint"), monkeypatch)


def _make_dir(path: Path, files: dict[str, bytes]) -> Path:
    for relative, data in files.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_bytes(data)
    return path


def _commit(store: ArtifactStore, source: Path) -> str:
    return store.commit(KEY, source, flow="curate", config=CONFIG, code_version="v-test",
                        extra={"rows": 3})


def _read_all(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes()
            for p in directory.rglob("*") if p.is_file()}


def _crashing_source(tmp_path: Path, content: bytes) -> Path:
    """A folder whose last file (in commit order) cannot be read: the commit dies after writing
    the others and before the manifest, as a crash at that point would."""
    source = _make_dir(tmp_path / "crashing", {"a.txt": content})
    (source / "zz-dangling").symlink_to(tmp_path / "does-not-exist")
    return source


def test_round_trip_keeps_bytes_and_records_provenance(backend: Backend, tmp_path: Path) -> None:
    files = {"a.txt": b"hello", "sub/b.bin": bytes(range(256)) * 10}
    uri = _commit(backend.store, _make_dir(tmp_path / "src", files))

    assert uri == backend.store.uri(KEY)
    assert backend.store.exists(KEY)
    assert _read_all(backend.store.fetch(KEY)) == files
    assert _read_all(backend.store.fetch(uri, tmp_path / "dest")) == files  # by URI, into dest
    manifest = backend.store.manifest(KEY)
    assert manifest["files"] == {
        "a.txt": {"sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
                  "size": 5},
        "sub/b.bin": {"sha256": hashlib.sha256(bytes(range(256)) * 10).hexdigest(), "size": 2560},
    }
    canonical = b'{"bands":[0.2,0.8],"name":"smoke","seed":7}'  # sorted keys, no spaces
    assert manifest["config_hash"] == hashlib.sha256(canonical).hexdigest()
    assert (manifest["flow"], manifest["code_version"], manifest["extra"]) == ("curate", "v-test",
                                                                                {"rows": 3})
    assert manifest["config"] == CONFIG


def test_crash_before_manifest_leaves_nothing_readers_accept(backend: Backend, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _commit(backend.store, _crashing_source(tmp_path, b"partial"))

    stored = backend.list_stored(KEY)
    assert [path.split("/")[-1] for path in stored] == ["a.txt"]  # the files did get written...
    assert not backend.store.exists(KEY)  # ...but without a manifest nobody reads them
    with pytest.raises(ArtifactNotFound):
        backend.store.fetch(KEY)
    with pytest.raises(ArtifactNotFound):
        backend.store.manifest(KEY)


def test_crash_while_replacing_keeps_the_old_artifact_whole(backend: Backend, tmp_path: Path) -> None:
    _commit(backend.store, _make_dir(tmp_path / "v1", {"a.txt": b"one"}))
    with pytest.raises(FileNotFoundError):
        _commit(backend.store, _crashing_source(tmp_path, b"two"))

    assert _read_all(backend.store.fetch(KEY)) == {"a.txt": b"one"}


def test_replacing_a_key_swaps_contents_and_drops_the_old_version(backend: Backend,
                                                                  tmp_path: Path) -> None:
    _commit(backend.store, _make_dir(tmp_path / "v1", {"a.txt": b"one", "old.txt": b"gone"}))
    _commit(backend.store, _make_dir(tmp_path / "v2", {"a.txt": b"two"}))

    assert _read_all(backend.store.fetch(KEY)) == {"a.txt": b"two"}
    version = backend.store.manifest(KEY)["version"]
    assert backend.list_stored(KEY) == sorted([f"{version}/a.txt", "manifest.json"])


def test_corrupted_file_fails_its_checksum(backend: Backend, tmp_path: Path) -> None:
    _commit(backend.store, _make_dir(tmp_path / "src", {"a.txt": b"hello", "b.txt": b"fine"}))
    version = backend.store.manifest(KEY)["version"]
    backend.overwrite(KEY, f"{version}/a.txt", b"jello")  # same size, one byte differs

    with pytest.raises(CorruptArtifactError, match=r"file a\.txt fails its checksum"):
        backend.store.fetch(KEY)
    with pytest.raises(CorruptArtifactError, match=r"file a\.txt fails its checksum"):
        backend.store.fetch(KEY, tmp_path / "dest")


def test_missing_key_and_bad_key(backend: Backend, tmp_path: Path) -> None:
    assert not backend.store.exists("datasets/never")
    with pytest.raises(ArtifactNotFound, match="datasets/never"):
        backend.store.fetch("datasets/never")
    with pytest.raises(ValueError, match="bad artifact key"):
        backend.store.commit("../escape", _make_dir(tmp_path / "src", {"a": b"x"}), flow="f",
                             config={}, code_version="v")


def test_s3_cache_is_reused_and_reverified(s3_endpoint: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _s3_backend(tmp_path, s3_endpoint, monkeypatch)
    _commit(backend.store, _make_dir(tmp_path / "src", {"a.txt": b"hello"}))
    cached = backend.store.fetch(KEY)
    assert cached.is_relative_to(tmp_path / "home" / "cache")
    assert backend.store.fetch(KEY) == cached

    (cached / "a.txt").write_bytes(b"HELLO")  # damage the local copy, not the bucket
    with pytest.raises(CorruptArtifactError, match=r"a\.txt"):
        backend.store.fetch(KEY)
