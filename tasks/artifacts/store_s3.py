"""Artifact store on S3 (or MinIO, through the endpoint URL); layout in tasks/artifacts/manifest.py.

S3 has no rename, so the version-folder layout is what makes commits safe here: files go to a
fresh `<key>/_v-<hex>/` prefix, then the manifest is one PUT (S3 is strongly read-after-write
consistent, so readers see the old manifest or the new one), then the replaced version's objects
are deleted. Fetching without `dest` downloads into `<cache_dir>/s3/<bucket>/<key>/<version>/`;
versions never change once written, so a cached folder is reused (and re-verified) as is.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from passband.tasks.artifacts.manifest import (
    MANIFEST_NAME,
    ArtifactNotFound,
    CorruptArtifactError,
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

DELETE_BATCH = 1000  # the most keys one DeleteObjects request accepts


class S3Store:
    """Artifacts under `s3://<bucket>/<prefix>`; credentials from the usual AWS env vars/files."""

    def __init__(self, bucket: str, prefix: str, *, endpoint_url: str | None,
                 cache_dir: Path) -> None:
        import boto3

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.cache_dir = cache_dir
        self._client = boto3.client("s3", endpoint_url=endpoint_url)

    def _object_key(self, *parts: str) -> str:
        return "/".join(part for part in (self.prefix, *parts) if part)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._object_key(check_key(key))}"

    def _manifest_or_none(self, key: str) -> dict[str, Any] | None:
        manifest_key = self._object_key(check_key(key), MANIFEST_NAME)
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=manifest_key)
        except self._client.exceptions.NoSuchKey:
            return None
        return decode_manifest(response["Body"].read(), self.uri(key))

    def exists(self, key: str) -> bool:
        return self._manifest_or_none(key) is not None

    def manifest(self, key: str) -> dict[str, Any]:
        manifest = self._manifest_or_none(key)
        if manifest is None:
            raise ArtifactNotFound(f"no artifact at {self.uri(key)} (no {MANIFEST_NAME})")
        return manifest

    def commit(self, key: str, local_dir: Path, *, flow: str, config: dict[str, Any],
               code_version: str, extra: dict[str, Any] | None = None) -> str:
        check_key(key)
        version = new_version()
        files = {}
        for relative, source in list_files(local_dir):
            files[relative] = hash_file(source)
            self._client.upload_file(str(source), self.bucket,
                                     self._object_key(key, version, relative))
        previous = self._manifest_or_none(key)
        manifest = build_manifest(key=key, version=version, files=files, flow=flow, config=config,
                                  code_version=code_version, extra=extra)
        self._client.put_object(Bucket=self.bucket, Key=self._object_key(key, MANIFEST_NAME),
                                Body=encode_manifest(manifest), ContentType="application/json")
        if previous is not None:
            self._delete_prefix(self._object_key(key, previous["version"]) + "/")
        return self.uri(key)

    def fetch(self, key_or_uri: str, dest: Path | None = None) -> Path:
        key = key_from(key_or_uri, f"s3://{self.bucket}/{self.prefix}")
        manifest = self.manifest(key)
        if dest is not None:
            self._download(key, manifest, dest)
            verify_files(manifest, dest, self.uri(key))
            return dest
        cached = self.cache_dir / "s3" / self.bucket / self._object_key(key, manifest["version"])
        if cached.is_dir():
            verify_files(manifest, cached, self.uri(key))
            return cached
        cached.parent.mkdir(parents=True, exist_ok=True)
        # Download and verify beside the final folder, then rename: neither a crash mid-download
        # nor a corrupt object may leave a folder that the next fetch takes for a good copy.
        with tempfile.TemporaryDirectory(dir=cached.parent, prefix=".download-") as staging:
            self._download(key, manifest, Path(staging) / "files")
            verify_files(manifest, Path(staging) / "files", self.uri(key))
            os.rename(Path(staging) / "files", cached)
        return cached

    def _download(self, key: str, manifest: dict[str, Any], dest: Path) -> None:
        from botocore.exceptions import ClientError

        for relative in manifest["files"]:
            (dest / relative).parent.mkdir(parents=True, exist_ok=True)
            object_key = self._object_key(key, manifest["version"], relative)
            try:
                self._client.download_file(self.bucket, object_key, str(dest / relative))
            except ClientError as error:
                if error.response["Error"]["Code"] not in ("404", "NoSuchKey"):
                    raise
                raise CorruptArtifactError(
                    f"{self.uri(key)}: file {relative} listed in the manifest is missing"
                    f" (s3://{self.bucket}/{object_key})"
                ) from error

    def _delete_prefix(self, prefix: str) -> None:
        paginator = self._client.get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self.bucket, Prefix=prefix)
        object_keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
        for start in range(0, len(object_keys), DELETE_BATCH):
            batch = [{"Key": key} for key in object_keys[start : start + DELETE_BATCH]]
            self._client.delete_objects(Bucket=self.bucket,
                                        Delete={"Objects": batch, "Quiet": True})
