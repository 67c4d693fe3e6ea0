"""Tool calls in the Hermes/Qwen format: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

Templates with a tool format of their own (Qwen2.5's, Hermes') render the `tools=` of
`apply_chat_template` into the system prompt and ask for exactly this. Templates that ignore
`tools=` (SmolLM2's) get the same instructions from us, appended to the system message
(`with_tool_instructions`), so one parser reads every model's calls. Parsing never raises: a call
that cannot be read becomes a `MalformedCall` whose message is the observation the model gets.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from passband.training.episodes.environment import Messages

_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
_FORMAT = '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'


@dataclass(frozen=True)
class ToolCall:
    """A call that parsed: the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class MalformedCall:
    """A `<tool_call>` that could not be read; `message` says why, for the model."""

    message: str


def parse_tool_calls(text: str) -> list[ToolCall | MalformedCall]:
    """Every `<tool_call>` block of `text` in order (an unclosed last one included, as malformed)."""
    calls: list[ToolCall | MalformedCall] = []
    for match in _CALL.finditer(text):
        body, closing = match.group(1).strip(), match.group(2)
        if not closing:
            calls.append(MalformedCall("tool call not closed with </tool_call>"))
            continue
        try:
            value = json.loads(body)
        except json.JSONDecodeError as error:
            calls.append(MalformedCall(f"tool call is not valid JSON ({error.msg} at char {error.pos}); "
                                       f"write {_FORMAT}"))
            continue
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            calls.append(MalformedCall(f'tool call must be a JSON object with a string "name"; write {_FORMAT}'))
            continue
        arguments = value.get("arguments", {})
        if isinstance(arguments, str):  # some models write the arguments object as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                pass
        if not isinstance(arguments, dict):
            calls.append(MalformedCall(f'tool call "arguments" must be a JSON object; write {_FORMAT}'))
            continue
        calls.append(ToolCall(value["name"], arguments))
    return calls


def tool_instructions(tools: list[dict[str, Any]]) -> str:
    """The tool section of a system prompt, in the words Qwen2.5's template uses."""
    signatures = "\n".join(json.dumps(tool) for tool in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{signatures}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            f"<tool_call></tool_call> XML tags:\n{_FORMAT}")


def renders_tools(tokenizer: Any, tools: list[dict[str, Any]]) -> bool:
    """Whether the chat template writes `tools=` into the conversation (else it ignores them)."""
    probe = [{"role": "user", "content": "hi"}]
    plain = tokenizer.apply_chat_template(probe, tokenize=False)
    return tokenizer.apply_chat_template(probe, tools=tools, tokenize=False) != plain


def with_tool_instructions(tokenizer: Any, messages: Messages, tools: list[dict[str, Any]]) -> Messages:
    """`messages` as they go to the template: unchanged where it renders `tools=` itself, else with
    `tool_instructions` appended to the system message (one made when there is none)."""
    if not tools or renders_tools(tokenizer, tools):
        return messages
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{tool_instructions(tools)}"}, *messages[1:]]
    return [{"role": "system", "content": tool_instructions(tools)}, *messages]


def tool_message(content: str) -> dict[str, str]:
    """A tool result as a chat message (role 'tool': Qwen2.5 wraps it in <tool_response>, ChatML
    templates without tool support write it as a 'tool' turn)."""
    return {"role": "tool", "content": content}
