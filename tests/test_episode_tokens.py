"""Token-exact multi-turn episodes (issue 55): the sequence is the sampled tokens as sampled plus the
chat template's environment tokens, on SmolLM2's template and on Qwen2.5's; the loss mask is 1
exactly on the sampled tokens; a template that rewrites the conversation fails loudly."""

from __future__ import annotations

import json

import pytest

from episode_fixtures import QWEN25_TEMPLATE, ScriptedPolicy, smollm2_tokenizer, with_template
from passband.training.engines.config import SamplingConfig
from passband.training.episodes.environment import EpisodeBudget
from passband.training.episodes.math_python import MathPythonEnvironment, MathPythonSettings
from passband.training.episodes.rollout import run_episodes
from passband.training.episodes.tokens import TemplateError, environment_text, render
from passband.training.episodes.tool_calls import tool_instructions
from passband.training.episodes.python_tool import PYTHON_TOOL, PythonToolSettings

# a loaded 2-core box has taken over 5 s (the default wall limit) to start Python in the sandbox
ENVIRONMENT = MathPythonEnvironment(MathPythonSettings(tool=PythonToolSettings(wall_timeout_s=30.0)))
ROW = {"id": "p0", "task": "math", "prompt": "What is 6 times 7? Answer with just the number.", "reference": "42"}


def _call(code: str) -> str:
    return "Let me compute.\n<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": code}}) + "\n</tool_call>"


TURNS = [_call("print(6*7)"), _call("print(6*7 == 42)"), "The answer is 42."]
OBSERVATIONS = ["42", "True"]
# The environment text each template writes after a sampled <|im_end|>, through the next
# "<|im_start|>assistant\n", written out by hand from the two templates.
EXPECTED_ENVIRONMENT = {
    "smollm2": lambda obs: f"\n<|im_start|>tool\n{obs}<|im_end|>\n<|im_start|>assistant\n",
    "qwen25": lambda obs: f"\n<|im_start|>user\n<tool_response>\n{obs}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
}


@pytest.fixture(scope="module")
def tokenizers(smollm2_dir):
    smol = smollm2_tokenizer(smollm2_dir)
    return {"smollm2": smol, "qwen25": with_template(smol, QWEN25_TEMPLATE)}


def _sampled_turns(tokenizer) -> list[list[int]]:
    """The turns as a policy might sample them: the first one with "print" spelled letter by letter
    (a tokenization the tokenizer itself would never produce), each ended by <|im_end|>."""
    eos = tokenizer.eos_token_id
    first = TURNS[0]
    head, tail = first.split("print", 1)
    letters = [tokenizer.convert_tokens_to_ids(letter) for letter in "print"]
    turns = [tokenizer.encode(head, add_special_tokens=False) + letters + tokenizer.encode(tail, add_special_tokens=False)]
    turns += [tokenizer.encode(text, add_special_tokens=False) for text in TURNS[1:]]
    return [turn + [eos] for turn in turns]


@pytest.mark.parametrize("family", ["smollm2", "qwen25"])
def test_three_turn_episode_is_sampled_plus_template_tokens(tokenizers, family):
    tokenizer = tokenizers[family]
    sampled = _sampled_turns(tokenizer)
    assert tokenizer.encode(tokenizer.decode(sampled[0]), add_special_tokens=False) != sampled[0]  # not canonical
    policy = ScriptedPolicy({"p0/0": sampled})
    environment = ENVIRONMENT
    (result,) = run_episodes(policy, tokenizer, [environment.open(ROW)], ["p0/0"],
                             SamplingConfig(max_tokens=200, temperature=1.0), EpisodeBudget(max_turns=3))

    assert (result.status, result.reward, result.num_turns, result.num_tool_calls) == ("pass", 1.0, 3, 2)
    # The opening prompt: the template's own rendering (SmolLM2 ignores tools=, so our tool
    # instructions are in its system message; Qwen2.5 writes the tool list itself).
    system = environment.settings.system
    if family == "smollm2":
        system += "\n\n" + tool_instructions([PYTHON_TOOL])
    opening = [{"role": "system", "content": system}, {"role": "user", "content": ROW["prompt"]}]
    prompt_ids = tokenizer.encode(render(tokenizer, opening, [PYTHON_TOOL], True), add_special_tokens=False)
    environment_ids = [tokenizer.encode(EXPECTED_ENVIRONMENT[family](obs), add_special_tokens=False)
                       for obs in OBSERVATIONS]
    expected = sampled[0] + environment_ids[0] + sampled[1] + environment_ids[1] + sampled[2]
    assert result.tokens.prompt_ids == prompt_ids
    assert result.tokens.token_ids == expected
    assert result.tokens.loss_mask == ([1] * len(sampled[0]) + [0] * len(environment_ids[0]) + [1] * len(sampled[1])
                                       + [0] * len(environment_ids[1]) + [1] * len(sampled[2]))
    # engine log-probs land on the sampled tokens only (the scripted policy's -(1 + t) / 100)
    assert result.tokens.logprobs == ([-(1 + t) / 100 for t in range(len(sampled[0]))] + [0.0] * len(environment_ids[0])
                                      + [-(1 + t) / 100 for t in range(len(sampled[1]))] + [0.0] * len(environment_ids[1])
                                      + [-(1 + t) / 100 for t in range(len(sampled[2]))])
    # each turn continued from the exact context so far
    assert policy.prompts == [prompt_ids, prompt_ids + expected[: len(sampled[0]) + len(environment_ids[0])],
                              prompt_ids + expected[: len(expected) - len(sampled[2])]]
    # byte for byte what the template renders for the whole conversation (which ends with a "\n"
    # after the last <|im_end|>, never sampled)
    conversation = opening + [{"role": "assistant", "content": TURNS[0]}, {"role": "tool", "content": "42"},
                              {"role": "assistant", "content": TURNS[1]}, {"role": "tool", "content": "True"},
                              {"role": "assistant", "content": TURNS[2]}]
    assert result.messages == conversation
    full = tokenizer.decode(result.tokens.prompt_ids + result.tokens.token_ids, skip_special_tokens=False)
    assert (full + "\n").encode() == render(tokenizer, conversation, [PYTHON_TOOL], False).encode()
    sample = result.to_sample(0, 0)
    assert (sample.token_ids, sample.loss_mask, sample.text) == (expected, result.tokens.loss_mask, TURNS[2])


def test_template_that_rewrites_a_past_turn_fails_loudly(tokenizers):
    # A template that trims assistant content: a turn sampled with a trailing space would be
    # re-rendered without it, so its tokens would not be the sampled ones.
    trimming = with_template(tokenizers["smollm2"], tokenizers["smollm2"].chat_template.replace(
        "message['content']", "message['content'] | trim"))
    history = [{"role": "user", "content": "hi"}]
    with pytest.raises(TemplateError, match="sampled"):
        environment_text(trimming, history, "hello ", [{"role": "tool", "content": "x"}], [])
    assert environment_text(trimming, history, "hello", [{"role": "tool", "content": "x"}], []) == \
        "\n<|im_start|>tool\nx<|im_end|>\n<|im_start|>assistant\n"


def test_template_that_is_not_a_growing_string_fails_loudly(tokenizers):
    # A template whose first line counts the tool results so far: appending an observation changes
    # text already turned into tokens.
    smol, qwen = tokenizers["smollm2"], tokenizers["qwen25"]
    counting = with_template(smol, "{{ messages | selectattr('role', 'equalto', 'tool') | list | length }}"
                             + smol.chat_template)
    history = [{"role": "user", "content": "hi"}]
    with pytest.raises(TemplateError, match="prefix"):
        environment_text(counting, history, "a", [{"role": "tool", "content": "1"}], [])
    # Qwen2.5 closes a run of tool messages only after the last one: a step's tool results go in one
    # observation, and become one user turn holding two <tool_response> blocks.
    two = [{"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}]
    assert environment_text(qwen, history, "a", two, []) == (
        "\n<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")


def test_budgets_end_episodes(tokenizers):
    tokenizer = tokenizers["smollm2"]
    sampled = _sampled_turns(tokenizer)
    policy = ScriptedPolicy({"a": sampled, "b": sampled, "c": sampled})
    environment = ENVIRONMENT
    episodes = [environment.open(ROW) for _ in range(3)]
    budgets = {"a": EpisodeBudget(max_turns=1), "b": EpisodeBudget(episode_tokens=len(sampled[0]) - 1),
               "c": EpisodeBudget(episode_tokens=len(sampled[0]) + 5)}
    results = {key: run_episodes(policy, tokenizer, [episode], [key], SamplingConfig(max_tokens=200), budgets[key])[0]
               for key, episode in zip("abc", episodes)}
    # one turn: the tool call is graded as the final answer ("6*7" read as the last number, 7)
    assert (results["a"].num_turns, results["a"].status, results["a"].reward, results["a"].truncated) == (1, "fail", 0.0, False)
    # the first turn cut one token short of its <|im_end|>: truncated, graded, no continuation
    assert results["b"].truncated and results["b"].num_turns == 1
    assert results["b"].tokens.token_ids == sampled[0][:-1] and results["b"].to_sample(0, 0).finish_reason == "length"
    # the tool's observation would pass the token budget: ended there, its tokens not appended
    assert results["c"].truncated and results["c"].reward is None and results["c"].tokens.token_ids == sampled[0]
    assert results["c"].tokens.loss_mask == [1] * len(sampled[0])
