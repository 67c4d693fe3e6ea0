"""Tools in multi-turn episodes (issue 55): the <tool_call> parser, the Python tool in the sandbox
(hostile calls contained; each hostile program bounds itself, as in test_verifiers_code_sandbox.py,
so that a broken sandbox fails the test instead of harming the machine), the per-episode tool cap,
and environment steps that run concurrently under a per-step timeout."""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from episode_fixtures import ScriptedPolicy
from hostile_programs import FORK_BOMB, host_listener, write_probe
from passband.training.engines.config import SamplingConfig
from passband.training.episodes.environment import EpisodeBudget, Step
from passband.training.episodes.math_python import MathPythonEnvironment, MathPythonSettings
from passband.training.episodes.python_tool import PythonToolSettings
from passband.training.episodes.rollout import run_episodes
from passband.training.episodes.tool_calls import MalformedCall, ToolCall, parse_tool_calls, with_tool_instructions
from tiny_chat_model import IM_END, tiny_tokenizer

ROW = {"id": "p", "task": "math", "prompt": "What is 6 times 7? Answer with just the number.", "reference": "42"}
TOOL = PythonToolSettings(wall_timeout_s=20.0, cpu_time_s=8)  # room for a slow start on a loaded box


def _call(code: str) -> str:
    return "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": textwrap.dedent(code)}}) + "</tool_call>"


def test_tool_calls_parse_and_malformed_ones_say_why():
    text = ('a <tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call> b '
            '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(2)\\"}"}</tool_call>'
            '<tool_call>{"name": python}</tool_call><tool_call>[1]</tool_call>'
            '<tool_call>{"name": "python", "arguments": [1]}</tool_call><tool_call>{"name": "x"')
    calls = parse_tool_calls(text)
    assert calls[:2] == [ToolCall("python", {"code": "print(1)"}), ToolCall("python", {"code": "print(2)"})]
    assert [type(call) for call in calls[2:]] == [MalformedCall] * 4
    assert calls[2].message.startswith("tool call is not valid JSON (Expecting value at char 9)")
    assert calls[3].message.startswith('tool call must be a JSON object with a string "name"')
    assert calls[4].message.startswith('tool call "arguments" must be a JSON object')
    assert calls[5].message == "tool call not closed with </tool_call>"
    assert parse_tool_calls("The answer is 42.") == []


def test_tool_instructions_go_where_the_template_ignores_tools():
    tokenizer = tiny_tokenizer()  # SmolLM2's ChatML template: tools= is ignored
    messages = [{"role": "user", "content": "q"}]
    tools = MathPythonEnvironment().open(ROW).tools
    (system, user) = with_tool_instructions(tokenizer, messages, tools)
    assert system["role"] == "system" and "<tools>\n" + json.dumps(tools[0]) + "\n</tools>" in system["content"]
    assert user == messages[0]
    assert with_tool_instructions(tokenizer, messages, []) == messages


def _step(code: str, tool: PythonToolSettings = TOOL) -> str:
    episode = MathPythonEnvironment(MathPythonSettings(tool=tool)).open(ROW)
    step = episode.step(_call(code), final=False)
    assert not step.done and step.tool_calls == 1 and episode.num_tool_calls == 1
    (message,) = step.observation
    assert message["role"] == "tool"
    return message["content"]


def test_python_tool_runs_and_reports_errors():
    assert _step("print(6 * 7)") == "42"
    assert _step("1 / 0").endswith("ZeroDivisionError: division by zero\n[exit status 1]")
    assert _step("while True: pass", PythonToolSettings(wall_timeout_s=1.0, cpu_time_s=30)).startswith("[timed out after")
    assert _step("print('x' * 5000)", PythonToolSettings(max_output_chars=100)) == "x" * 100 + "\n[output cut at 100 characters]"


def test_hostile_fork_bomb_is_capped():
    out = _step(FORK_BOMB, PythonToolSettings(wall_timeout_s=30.0, cpu_time_s=10, max_processes=16))
    assert int(out) < 16  # the program itself is one of the 16


def test_hostile_network_attempt_fails():
    listener = host_listener()
    port = listener.getsockname()[1]
    out = _step(f"""
        import socket
        for address in [("127.0.0.1", {port}), ("1.1.1.1", 80)]:
            try:
                socket.create_connection(address, timeout=3).close()
                print("connected")
            except OSError as error:
                print(type(error).__name__)
    """)
    assert out.split() == ["OSError", "OSError"]
    try:
        listener.accept()
        raise AssertionError("the tool reached the host's listener")
    except BlockingIOError:
        pass
    finally:
        listener.close()


def test_hostile_write_outside_its_folder_fails():
    marker = f"passband-tool-escape-{uuid.uuid4().hex}"
    repo_file = Path.cwd() / marker
    out = _step(write_probe([str(repo_file), f"/etc/{marker}", f"/{marker}"]) + textwrap.dedent("""
        import os
        open("local.txt", "w").write("ok")  # its own folder is writable
        print(open("local.txt").read(), os.getcwd())
    """))
    lines = out.splitlines()
    assert set(lines[:3]) <= {"EROFS", "EACCES", "ENOENT"} and lines[3] == "ok /tmp", out
    assert not repo_file.exists() and not Path("/etc", marker).exists()


def test_tool_calls_are_capped_and_malformed_calls_answered():
    episode = MathPythonEnvironment(MathPythonSettings(tool=TOOL, max_tool_calls=1)).open(ROW)
    step = episode.step(_call("print(1)") + "<tool_call>{oops}</tool_call>" + _call("print(2)"), final=False)
    assert [m["content"] for m in step.observation] == [
        "1", "error: tool call is not valid JSON (Expecting property name enclosed in double quotes at char 1); write "
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>',
        "error: no tool calls left in this episode; give your final answer"]
    assert (step.tool_calls, episode.num_tool_calls) == (3, 1)
    final = episode.step("It is 42", final=False)
    assert (final.done, final.status, final.reward) == (True, "pass", 1.0)


@dataclass
class SleepyEpisode:
    """A test environment: each step sleeps `seconds`, then ends the episode with reward 1."""

    seconds: float
    messages: list = field(default_factory=lambda: [{"role": "user", "content": "q"}])
    tools: list = field(default_factory=list)

    def step(self, text: str, final: bool) -> Step:
        time.sleep(self.seconds)
        return Step(done=True, reward=1.0, status="pass")


def test_environment_steps_run_concurrently_under_a_timeout():
    tokenizer = tiny_tokenizer()
    turn = list(b"ok") + [IM_END]
    keys = [f"e{i}" for i in range(5)]
    policy = ScriptedPolicy({key: [turn] for key in keys})
    episodes = [SleepyEpisode(2.0) for _ in range(4)] + [SleepyEpisode(10.0)]
    start = time.monotonic()
    results = run_episodes(policy, tokenizer, episodes, keys, SamplingConfig(max_tokens=8),
                           EpisodeBudget(step_timeout_s=3.0))
    elapsed = time.monotonic() - start
    # four 2 s steps side by side, the 10 s one cut at 3 s: about 3 s, where one after the other
    # would take 4 x 2 + 3 = 11 s (the margin is for a loaded box)
    assert elapsed < 7.0
    assert [(r.status, r.reward) for r in results] == [("pass", 1.0)] * 4 + [("error", None)]
    assert results[4].detail == "environment step ran past 3.0 s"
    assert all(1.9 < r.env_seconds < 3.0 for r in results[:4]) and results[4].env_seconds == 3.0


@dataclass
class SlowFirstStep:
    """A test environment: the first step answers "again" after `seconds`, the second ends the episode."""

    seconds: float
    messages: list = field(default_factory=lambda: [{"role": "user", "content": "q"}])
    tools: list = field(default_factory=list)
    steps: int = 0

    def step(self, text: str, final: bool) -> Step:
        self.steps += 1
        if self.steps == 1:
            time.sleep(self.seconds)
            return Step(done=False, observation=[{"role": "user", "content": "again"}])
        return Step(done=True, reward=1.0, status="pass")


@dataclass
class TimedPolicy(ScriptedPolicy):
    """ScriptedPolicy that records when each engine call came and which episode turns it held."""

    calls: list = field(default_factory=list)

    def generate(self, prompts, sampling, prompt_keys=None):
        self.calls.append((time.monotonic(), list(prompt_keys)))
        return super().generate(prompts, sampling, prompt_keys)


def test_a_slow_step_holds_up_only_its_own_episode():
    """straggler_s: the fast episodes' second turns are sampled while the slow step still runs, and
    every episode ends with the tokens it gets when each call waits for every step (None)."""
    tokenizer, turn, keys = tiny_tokenizer(), list(b"ok") + [IM_END], ["e0", "e1", "e2"]

    def run(straggler_s):
        policy = TimedPolicy({key: [turn, turn] for key in keys})
        start = time.monotonic()
        results = run_episodes(policy, tokenizer, [SlowFirstStep(2.0), SlowFirstStep(0.0), SlowFirstStep(0.0)], keys,
                               SamplingConfig(max_tokens=8), EpisodeBudget(straggler_s=straggler_s))
        return results, [(at - start, called) for at, called in policy.calls]

    results, calls = run(0.2)
    assert [called for _, called in calls] == [["e0/turn0", "e1/turn0", "e2/turn0"], ["e1/turn1", "e2/turn1"],
                                               ["e0/turn1"]]
    assert calls[1][0] < 2.0 <= calls[2][0]  # the fast turns did not wait for the 2 s step
    waited, wave_calls = run(None)
    assert [called for _, called in wave_calls] == [[f"{k}/turn0" for k in keys], [f"{k}/turn1" for k in keys]]
    assert wave_calls[1][0] >= 2.0
    assert [(r.tokens, r.status, r.num_turns) for r in results] == [(r.tokens, r.status, r.num_turns) for r in waited]
    assert all(r.status == "pass" and r.num_turns == 2 for r in results)


@dataclass
class SlowPolicy(ScriptedPolicy):
    """ScriptedPolicy whose every engine call takes `seconds`."""

    seconds: float = 0.0

    def generate(self, prompts, sampling, prompt_keys=None):
        time.sleep(self.seconds)
        return super().generate(prompts, sampling, prompt_keys)


def test_timed_engine_tells_engine_time_from_waiting_on_steps():
    """One 0.3 s engine call, then a 0.6 s step: the engine's share is the call, the rest waited on the step."""
    from passband.training.episodes.groups import TimedEngine

    timed = TimedEngine(SlowPolicy({"e0": [list(b"ok") + [IM_END]]}, seconds=0.3))
    start = time.monotonic()
    run_episodes(timed, tiny_tokenizer(), [SleepyEpisode(0.6)], ["e0"], SamplingConfig(max_tokens=8), EpisodeBudget())
    wall = time.monotonic() - start
    assert 0.3 <= timed.seconds < 0.6 and wall - timed.seconds >= 0.6
