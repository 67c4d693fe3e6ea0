"""Test helpers for multi-turn episodes: SmolLM2's tokenizer, a Qwen2.5
chat template to put on it, and a scripted policy that "samples" given token ids."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from passband.training.engines.protocol import Sample

# Qwen2.5-Instruct's chat template (tools in the system prompt, <tool_call> JSON in assistant turns,
# tool results as <tool_response> blocks in one user turn), as Qwen ships it.
QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


def smollm2_tokenizer(model_dir):
    """SmolLM2-135M-Instruct's tokenizer and chat template, from the session's converted checkpoint
    (conftest's smollm2_dir, shared with the other tests on the real model)."""
    from passband.training.model_source import load_tokenizer

    return load_tokenizer(model_dir)


def with_template(tokenizer, template: str):
    """A copy of `tokenizer` with another chat template (same vocabulary, same <|im_end|> eos)."""
    other = copy.deepcopy(tokenizer)
    other.chat_template = template
    return other


@dataclass
class ScriptedPolicy:
    """A RolloutEngine whose "samples" are given: turns[key] is the list of token-id turns of the
    episode with that key (the part of the prompt key before '/turn'), `default` those of any other
    key. Records every prompt it is given."""

    turns: dict[str, list[list[int]]]
    default: list[list[int]] = field(default_factory=list)
    name: str = "scripted"
    prompts: list[list[int]] = field(default_factory=list)

    def generate(self, prompts, sampling, prompt_keys=None):
        batches = []
        for index, (prompt, key) in enumerate(zip(prompts, prompt_keys, strict=True)):
            episode, turn = key.rsplit("/turn", 1)
            scripted = self.turns.get(episode, self.default)[int(turn)]
            ids = scripted[: sampling.max_tokens]
            self.prompts.append(list(prompt))
            # log-probs -(1 + position) / 100: distinct values, to see where each one lands
            batches.append([Sample(index, 0, ids, "", [-(1 + t) / 100 for t in range(len(ids))],
                                   "length" if len(scripted) > len(ids) else "stop", list(prompt))])
        return batches
