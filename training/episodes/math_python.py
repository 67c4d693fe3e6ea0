"""Math with a Python tool (tool-integrated reasoning): the model may run Python in the sandbox,
turn by turn, and its first turn without a tool call is its final answer, checked by the math
verifier with the math task's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from passband.curation.catalog.math import MATH, MathSettings
from passband.training.chat import to_messages
from passband.training.episodes.environment import EpisodeBudget, Messages, Step
from passband.training.episodes.python_tool import PYTHON_TOOL, PythonToolSettings, run_python_tool
from passband.training.episodes.tool_calls import MalformedCall, ToolCall, parse_tool_calls, tool_message
from passband.training.episodes.verdict import final_step

SYSTEM = ("You are a helpful assistant who solves math problems. You may run Python to compute: call the "
          "python tool, read its output, and call it again if needed. When you know the answer, reply "
          "without a tool call and give the answer as the question asks.")
"""The system message of every episode; the tool format is the template's (or ours, tool_calls.py)."""


class MathPythonSettings(BaseModel):
    """How math-with-Python episodes run and are graded."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    tool: PythonToolSettings = PythonToolSettings()
    """Limits of each Python call."""
    max_tool_calls: int = Field(3, ge=0)
    """Python runs per episode; later calls are answered with a message saying so, unrun."""
    system: str = SYSTEM
    """The system message."""


def answer_call(call: ToolCall | MalformedCall, calls_left: int, settings: PythonToolSettings) -> tuple[str, bool]:
    """(what the model reads after one call: its output or why it was not run, whether it ran)."""
    if isinstance(call, MalformedCall):
        return f"error: {call.message}", False
    if call.name != PYTHON_TOOL["function"]["name"]:
        return f"error: unknown tool {call.name!r}; the only tool is 'python'", False
    if not isinstance(call.arguments.get("code"), str):
        return 'error: the python tool takes {"code": "<program>"}', False
    if calls_left <= 0:
        return "error: no tool calls left in this episode; give your final answer", False
    return run_python_tool(call.arguments["code"], settings), True


@dataclass
class MathPythonEpisode:
    """One problem: tool turns until a turn without a call (or the final turn) is graded."""

    messages: Messages
    reference: str
    settings: MathPythonSettings
    math: MathSettings
    tools: list[dict[str, Any]] = field(default_factory=lambda: [PYTHON_TOOL])
    num_tool_calls: int = 0
    """Python runs so far (refused calls not counted)."""

    def step(self, text: str, final: bool) -> Step:
        calls = parse_tool_calls(text)
        if final or not calls:
            return final_step(MATH.verify([text], [self.reference], self.math)[0], len(calls))
        observation = []
        for call in calls:
            text_out, ran = answer_call(call, self.settings.max_tool_calls - self.num_tool_calls, self.settings.tool)
            observation.append(tool_message(text_out))
            self.num_tool_calls += int(ran)
        return Step(done=False, observation=observation, tool_calls=len(calls))


@dataclass(frozen=True)
class MathPythonEnvironment:
    """Math rows (the math suite's {prompt, reference}) as episodes with the Python tool, the final
    answer read and checked with `math` (the math task's verifier settings)."""

    settings: MathPythonSettings = MathPythonSettings()
    math: MathSettings = MathSettings()

    def open(self, row: dict[str, Any]) -> MathPythonEpisode:
        return MathPythonEpisode(to_messages(row["prompt"], self.settings.system), row["reference"], self.settings,
                                 self.math)


class MathToolConfig(BaseModel):
    """Math rows as multi-turn episodes with the Python tool (docs/multi-turn.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    environment: MathPythonSettings = MathPythonSettings()
    """The tool's limits, the tool-call cap and the system message."""
    budget: EpisodeBudget = EpisodeBudget(max_turns=3, episode_tokens=512)
    """Turns, tokens (sampled and environment ones) and seconds per environment step of an episode."""
