"""The Python tool: the model's code run in the project's sandbox (curation/verifiers/sandbox.py:
no network, a size-capped tmpfs as its only writable folder, CPU/memory/process/output limits,
nothing left running), its output returned as the observation."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from passband.curation.verifiers.sandbox import SandboxLimits, SandboxOutcome, run_python

PYTHON_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run a Python 3 program and return what it prints (stdout, then stderr). "
                       "No network; files only in its working directory; state is not kept between calls.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The program; print the values you need."}},
            "required": ["code"],
        },
    },
}
"""The tool's JSON schema, as `apply_chat_template(tools=...)` takes it."""


class PythonToolSettings(BaseModel):
    """Limits of one Python tool call."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    wall_timeout_s: float = Field(5.0, gt=0)
    """Wall seconds per call; the program's whole process tree is killed past it."""
    cpu_time_s: int = Field(5, ge=1)
    """CPU seconds per call (RLIMIT_CPU)."""
    memory_bytes: int = Field(512 << 20, ge=64 << 20)
    """Address space per process, bytes (RLIMIT_AS)."""
    max_processes: int = Field(16, ge=1)
    """Processes and threads at any one time (RLIMIT_NPROC, counted for this call alone)."""
    max_output_chars: int = Field(1000, ge=16)
    """Characters of output the model sees (the rest is cut, with a note saying so)."""

    def limits(self) -> SandboxLimits:
        """The sandbox limits of one call."""
        return SandboxLimits(wall_timeout_s=self.wall_timeout_s, cpu_time_s=self.cpu_time_s,
                             memory_bytes=self.memory_bytes, max_processes=self.max_processes,
                             max_output_bytes=4 * self.max_output_chars)


def observation_text(outcome: SandboxOutcome, max_chars: int) -> str:
    """What the model reads of a run: stdout, stderr, and a line for a timeout or a non-zero exit."""
    parts = [outcome.stdout]
    if outcome.stderr:
        parts.append(outcome.stderr)
    if outcome.timed_out:
        parts.append(f"[timed out after {outcome.wall_s:.1f} s]")
    elif outcome.returncode:
        parts.append(f"[exit status {outcome.returncode}]")
    text = "\n".join(part.rstrip("\n") for part in parts if part).strip("\n")
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n[output cut at {max_chars} characters]"
    return text or "[no output]"


def run_python_tool(code: str, settings: PythonToolSettings) -> str:
    """Run `code` in the sandbox under `settings`; the observation text."""
    return observation_text(run_python(code, limits=settings.limits()), settings.max_output_chars)
