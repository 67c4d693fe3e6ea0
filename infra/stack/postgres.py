"""The production stack run from source, without Docker: PostgreSQL 15, a Prefect server and an
MLflow tracking server on it, and moto's S3 server standing in for MinIO.

The services, databases, buckets, credentials and MLflow's artifact proxy are those of
infra/docker-compose.yaml, read from infra/stack.env; only hosts and ports differ (everything on
127.0.0.1). `client_env()` is what `set -a; . infra/stack.env` gives a user of the compose stack,
pointed at these ports; `start()` also writes it to `<root>/stack.env`. Used by
`passband up --stack postgres` and tests/test_stack_postgres.py.

moto keeps its objects in memory: stopping the S3 server loses the buckets (a stand-in for MinIO
that forgets). PostgreSQL refuses to run as root, so as root its binaries run as the `postgres`
system user (Debian's own service does the same).
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict

from passband.stack.local import STARTUP_TIMEOUT_S
from passband.tasks.host.processes import ProcessDir

INFRA = Path(__file__).resolve().parents[1]
MLFLOW_ARTIFACTS_DESTINATION = "s3://mlflow/"
"""Where the MLflow server puts run artifacts (compose: `--artifacts-destination s3://mlflow/`)."""
DATABASES = ("prefect", "mlflow")
"""Compose's POSTGRES_DB (Prefect's) and the one infra/postgres-init.sql creates (MLflow's)."""
POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
SERVICES = ("s3", "prefect-server", "mlflow-server")
"""The HTTP services, in start order (PostgreSQL is started first, by pg_ctl)."""


class StackPorts(BaseModel):
    """Ports on 127.0.0.1; 0 picks a free one. Defaults: compose's published ports."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    postgres: int = 5432
    """PostgreSQL (compose keeps it inside its network on 5432)."""
    prefect: int = 4200
    """Prefect server: UI and API (`/api`)."""
    mlflow: int = 5000
    """MLflow tracking server (UI, REST API, artifact proxy)."""
    s3: int = 9000
    """The S3 API (MinIO's port in compose; moto's server here)."""


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an env file such as infra/stack.env (comments and blank lines skipped)."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PostgresStack:
    """The stack's processes under `root`: `postgres/` (data), `logs/<service>.log`,
    `run/<service>.pid`, `prefect/` (PREFECT_HOME of the server) and `stack.env` (client settings)."""

    def __init__(self, root: Path, ports: StackPorts = StackPorts(), env_file: Path = INFRA / "stack.env") -> None:
        self.root = root.resolve()
        self.processes = ProcessDir(self.root)
        self.ports = StackPorts(**{name: port or _free_port() for name, port in ports.model_dump().items()})
        self.env_file = env_file
        self.settings = read_env_file(env_file)
        missing = {"POSTGRES_USER", "POSTGRES_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                   "PASSBAND_ARTIFACT_ROOT"} - set(self.settings)
        if missing:
            raise ValueError(f"{env_file} lacks {', '.join(sorted(missing))} (see infra/stack.env)")

    # -- what each service is given: compose's values, on our ports -------------------------------

    def database_url(self, database: str, driver: str = "postgresql") -> str:
        """`driver://user:password@127.0.0.1:port/database`, as compose's services are given it."""
        s = self.settings
        return f"{driver}://{s['POSTGRES_USER']}:{s['POSTGRES_PASSWORD']}@127.0.0.1:{self.ports.postgres}/{database}"

    def url(self, service: str) -> str:
        """Base URL of "prefect", "mlflow" or "s3"."""
        return f"http://127.0.0.1:{getattr(self.ports, service)}"

    def buckets(self) -> tuple[str, str]:
        """MLflow's bucket and passband's (compose's create-buckets makes both)."""
        return urlparse(MLFLOW_ARTIFACTS_DESTINATION).netloc, urlparse(self.settings["PASSBAND_ARTIFACT_ROOT"]).netloc

    def client_env(self) -> dict[str, str]:
        """infra/stack.env for the flows, pointed at this stack (the POSTGRES_* pair is the servers')."""
        env = {key: value for key, value in self.settings.items() if not key.startswith("POSTGRES_")}
        return {**env, "PREFECT_API_URL": f"{self.url('prefect')}/api", "PASSBAND_MLFLOW_URI": self.url("mlflow"),
                "PASSBAND_S3_ENDPOINT_URL": self.url("s3")}

    def _aws_env(self) -> dict[str, str]:
        return {key: self.settings[key] for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
                if key in self.settings}

    def command(self, service: str) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) of one HTTP service, mirroring its compose service."""
        bin_dir = Path(sys.executable).parent
        if service == "s3":
            return [str(bin_dir / "moto_server"), "-H", "127.0.0.1", "-p", str(self.ports.s3)], self._aws_env()
        if service == "prefect-server":
            return ([str(bin_dir / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(self.ports.prefect)],
                    {"PREFECT_HOME": str(self.root / "prefect"),
                     "PREFECT_API_DATABASE_CONNECTION_URL": self.database_url("prefect", "postgresql+asyncpg"),
                     "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                     "PREFECT_UI_API_URL": f"{self.url('prefect')}/api"})
        if service == "mlflow-server":
            # one worker: see infra/stack/local.py (uvicorn's supervisor kills slow-starting workers on a busy box)
            return ([str(bin_dir / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.ports.mlflow),
                     "--backend-store-uri", self.database_url("mlflow", "postgresql+psycopg"),
                     "--artifacts-destination", MLFLOW_ARTIFACTS_DESTINATION, "--workers", "1"],
                    {"MLFLOW_S3_ENDPOINT_URL": self.url("s3"), **self._aws_env()})
        raise ValueError(f"unknown service {service!r} (services: {', '.join(SERVICES)})")

    def health_url(self, service: str) -> str:
        return {"s3": f"{self.url('s3')}/moto-api/", "prefect-server": f"{self.url('prefect')}/api/health",
                "mlflow-server": f"{self.url('mlflow')}/health"}[service]

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self) -> dict[str, str]:
        """Start whatever is not running, in dependency order; return the client settings."""
        self._start_postgres()
        self.start_service("s3")
        self._create_buckets()
        for service in ("prefect-server", "mlflow-server"):
            self.start_service(service, wait=False)
        for service in ("prefect-server", "mlflow-server"):
            self.wait_healthy(service)
        env = self.client_env()
        (self.root / "stack.env").write_text("".join(f"{key}={value}\n" for key, value in env.items()))
        (self.root / "ports.json").write_text(json.dumps(self.ports.model_dump()))
        return env

    def start_service(self, service: str, wait: bool = True) -> None:
        """Start one HTTP service in its own process group unless it runs; wait for its health URL."""
        self.processes.spawn(service, *self.command(service))
        if wait:
            self.wait_healthy(service)

    def wait_healthy(self, service: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Wait until the service's health URL answers 200; fail at once, with its log, if it exits."""
        self.processes.wait_http(service, self.health_url(service), timeout_s)

    def pid(self, service: str) -> int | None:
        """The process (group) id of a running service, None when it is not running."""
        return self.processes.pid(service)

    def kill(self, service: str) -> None:
        """SIGKILL one service's process group, as a crash would (for outage tests)."""
        pid = self.pid(service)
        if pid is None:
            raise RuntimeError(f"{service} is not running (no live pid in {self.root / 'run'})")
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.pid(service) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        self.processes.pid_file(service).unlink()

    def stop(self) -> list[str]:
        """Stop every service, PostgreSQL last; return the names stopped."""
        stopped = [service for service in reversed(SERVICES) if self.processes.stop(service)]
        if self.postgres_running():
            self._as_postgres([str(POSTGRES_BIN / "pg_ctl"), "stop", "-D", str(self.root / "postgres"), "-m", "fast"])
            stopped.append("postgres")
        return stopped

    # -- PostgreSQL and the buckets, as compose's postgres and create-buckets services --------------

    def _start_postgres(self) -> None:
        data = self.root / "postgres"
        fresh = not (data / "PG_VERSION").is_file()
        if fresh:
            data.mkdir(parents=True, exist_ok=True)
            self._chown_to_postgres(data)
            password_file = self.root / "postgres-password"  # initdb reads it, then it goes
            password_file.write_text(self.settings["POSTGRES_PASSWORD"] + "\n")
            self._chown_to_postgres(password_file)
            # as compose's postgres image: trust on the socket, scram-sha-256 over TCP
            self._as_postgres([str(POSTGRES_BIN / "initdb"), "-D", str(data), "-U", self.settings["POSTGRES_USER"],
                               f"--pwfile={password_file}", "--auth-local=trust", "--auth-host=scram-sha-256",
                               "--encoding=UTF8", "--locale=C.UTF-8"])
            password_file.unlink()
        elif self.postgres_running():
            return
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        log = self.root / "logs" / "postgres.log"
        log.touch()
        self._chown_to_postgres(log)
        self._as_postgres([str(POSTGRES_BIN / "pg_ctl"), "start", "-D", str(data), "-l", str(log), "-w",
                           "-t", str(STARTUP_TIMEOUT_S),
                           "-o", f"-p {self.ports.postgres} -c listen_addresses=127.0.0.1 -k {data}"])
        if fresh:
            self._create_databases()

    def postgres_running(self) -> bool:
        """Whether the cluster under `<root>/postgres` has a live server (`pg_ctl status`)."""
        if not (self.root / "postgres" / "PG_VERSION").is_file():
            return False
        return self._as_postgres([str(POSTGRES_BIN / "pg_ctl"), "status", "-D", str(self.root / "postgres")],
                                 check=False) == 0

    def _create_databases(self) -> None:
        import psycopg

        # autocommit: CREATE DATABASE cannot run inside a transaction
        with psycopg.connect(self.database_url("postgres"), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {DATABASES[0]};")  # compose: POSTGRES_DB
            connection.execute((INFRA / "postgres-init.sql").read_text())

    def _create_buckets(self) -> None:
        import boto3

        client = boto3.client("s3", endpoint_url=self.url("s3"), aws_access_key_id=self.settings["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=self.settings["AWS_SECRET_ACCESS_KEY"],
                              region_name=self.settings.get("AWS_DEFAULT_REGION", "us-east-1"))
        existing = {bucket["Name"] for bucket in client.list_buckets()["Buckets"]}
        for bucket in self.buckets():
            if bucket not in existing:  # `mc mb --ignore-existing`
                client.create_bucket(Bucket=bucket)

    def _as_postgres(self, argv: list[str], check: bool = True) -> int:
        """Run a PostgreSQL binary (as user postgres when we are root); its exit status."""
        prefix = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"] if os.geteuid() == 0 else []
        result = subprocess.run([*prefix, *argv], capture_output=True, text=True, cwd="/")
        if check and result.returncode != 0:
            raise RuntimeError(f"{Path(argv[0]).name} {argv[1]} failed (exit {result.returncode}); see"
                               f" {self.root / 'logs' / 'postgres.log'}:\n{result.stdout}{result.stderr}")
        return result.returncode

    def _chown_to_postgres(self, path: Path) -> None:
        if os.geteuid() != 0:
            return
        user = pwd.getpwnam("postgres")
        os.chown(path, user.pw_uid, user.pw_gid)
        for parent in path.parents:
            if not os.stat(parent).st_mode & 0o001:
                raise PermissionError(
                    f"PostgreSQL runs as user postgres here (it refuses root) and cannot reach {path}:"
                    f" {parent} is not world-executable (chmod o+x it, or put the stack's root elsewhere)")


def stack_root(home: Path) -> Path:
    """Where `passband up --stack postgres` keeps the stack of a PASSBAND_HOME."""
    return home / "stack"


def open_home_stack(home: Path) -> PostgresStack:
    """The stack of `home`, on the ports it was first started with (compose's by default)."""
    ports_file = stack_root(home) / "ports.json"
    ports = StackPorts.model_validate_json(ports_file.read_text()) if ports_file.is_file() else StackPorts()
    return PostgresStack(stack_root(home), ports)
