"""Local-store specifics: roots and URIs, the on-disk layout, keys, provenance hashes, settings.

The commit/fetch/crash/corruption/replace contract of both backends is in test_store_backends.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from passband.tasks.artifacts.manifest import MANIFEST_NAME, check_key
from passband.tasks.artifacts.provenance import code_version, config_hash, source_hash
from passband.tasks.artifacts.store import fetch_artifact, open_store
from passband.tasks.host.settings import StackSettings


def _source(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "data.txt").write_bytes(b"abc")
    return tmp_path / "src"


def test_plain_path_and_file_uri_open_the_same_store(tmp_path: Path) -> None:
    by_uri = open_store((tmp_path / "art").as_uri())
    by_path = open_store(str(tmp_path / "art"))
    key = "checkpoints/sft/run-1/step-000100"
    assert by_uri.uri(key) == by_path.uri(key) == f"file://{tmp_path}/art/{key}"

    by_path.commit(key, _source(tmp_path), flow="sft", config={}, code_version="v")
    assert by_uri.exists(key)
    assert (by_uri.fetch(key) / "data.txt").read_bytes() == b"abc"


def test_layout_is_manifest_beside_one_version_folder(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "art"))
    store.commit("datasets/x", _source(tmp_path), flow="curate", config={"a": 1}, code_version="v")

    artifact = tmp_path / "art" / "datasets" / "x"
    names = sorted(path.name for path in artifact.iterdir())
    assert len(names) == 2 and names[1] == MANIFEST_NAME and re.fullmatch(r"_v-[0-9a-f]{16}", names[0])
    manifest = json.loads((artifact / MANIFEST_NAME).read_text())
    assert manifest["version"] == names[0]
    assert (artifact / names[0] / "data.txt").read_bytes() == b"abc"
    assert store.fetch("datasets/x") == artifact / names[0]  # no copy without dest


def test_fetch_artifact_by_uri_under_any_root(tmp_path: Path) -> None:
    uri = open_store(str(tmp_path / "art")).commit("datasets/x", _source(tmp_path), flow="f",
                                                   config={}, code_version="v")
    fetched = fetch_artifact(uri, tmp_path / "copy")
    assert fetched == tmp_path / "copy" and (fetched / "data.txt").read_bytes() == b"abc"

    with pytest.raises(ValueError, match="not under this store's root"):
        open_store(str(tmp_path / "other")).fetch(uri)
    with pytest.raises(ValueError, match="full URI"):
        fetch_artifact("datasets/x")


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "a//b", "_v-123", ".hidden", "a/manifest.json",
                                 "a b", "a/b/"])
def test_bad_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="bad artifact key"):
        check_key(bad)


def test_good_keys_pass() -> None:
    assert check_key("checkpoints/sft/run=3/step-000100") == "checkpoints/sft/run=3/step-000100"


@pytest.mark.parametrize("root", ["http://host/x", "file://host/x", "s3:///prefix"])
def test_bad_roots_are_refused(root: str) -> None:
    with pytest.raises(ValueError, match="artifact root"):
        open_store(root)


def test_source_folder_problems_name_the_folder(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "art"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no files"):
        store.commit("k", tmp_path / "empty", flow="f", config={}, code_version="v")
    (tmp_path / "empty" / MANIFEST_NAME).write_text("{}")
    with pytest.raises(ValueError, match="reserved"):
        store.commit("k", tmp_path / "empty", flow="f", config={}, code_version="v")


def test_config_hash_is_sha256_of_canonical_json() -> None:
    config = {"b": [1, 2.5], "a": {"z": None, "y": "é"}}
    canonical = '{"a":{"y":"é","z":null},"b":[1,2.5]}'.encode()
    assert config_hash(config) == hashlib.sha256(canonical).hexdigest()
    assert config_hash({"a": {"y": "é", "z": None}, "b": [1, 2.5]}) == config_hash(config)
    with pytest.raises(ValueError):
        config_hash({"lr": float("nan")})


def test_source_hash_covers_paths_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "a.py").write_bytes(b"x = 1\n")
    (tmp_path / "flows" / "notes.txt").write_bytes(b"not source")
    relative = b"flows/a.py"
    expected = hashlib.sha256(len(relative).to_bytes(8, "big") + relative
                              + hashlib.sha256(b"x = 1\n").digest()).hexdigest()
    assert source_hash(tmp_path) == expected

    (tmp_path / "flows" / "a.py").write_bytes(b"x = 2\n")  # an uncommitted edit
    assert source_hash(tmp_path) != expected


def test_code_version_ends_with_the_source_hash() -> None:
    assert code_version().endswith(f"+src.{source_hash()[:12]}")


def test_settings_defaults_live_under_home_in_the_current_dir(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = StackSettings.from_env({"PREFECT_API_URL": ""})
    home = tmp_path / ".passband"
    assert settings.home == home
    assert settings.artifact_root == f"file://{home}/artifacts"
    assert settings.mlflow_uri == f"sqlite:///{home}/mlflow.db"
    assert settings.mlflow_artifact_root == f"file://{home}/mlflow-artifacts"
    assert (settings.experiment, settings.s3_endpoint_url, settings.prefect_api_url) == ("passband", None, None)


def test_settings_from_env(tmp_path: Path) -> None:
    settings = StackSettings.from_env({
        "PASSBAND_HOME": str(tmp_path), "PASSBAND_ARTIFACT_ROOT": "s3://b/p",
        "PASSBAND_MLFLOW_URI": "http://mlflow:5000", "AWS_ENDPOINT_URL": "http://aws",
        "PASSBAND_S3_ENDPOINT_URL": "http://minio:9000", "PREFECT_API_URL": "http://prefect/api",
    })
    assert (settings.artifact_root, settings.mlflow_uri) == ("s3://b/p", "http://mlflow:5000")
    assert settings.mlflow_artifact_root is None  # a tracking server chooses its own
    assert settings.s3_endpoint_url == "http://minio:9000"  # ours wins over AWS_ENDPOINT_URL
    assert settings.prefect_api_url == "http://prefect/api"
    assert StackSettings.from_env({"AWS_ENDPOINT_URL": "http://aws"}).s3_endpoint_url == "http://aws"
