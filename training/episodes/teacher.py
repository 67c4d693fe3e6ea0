"""Teacher-written episodes: written turns run through the real episode loop, so a teacher's tool
trace has the tokens, the environment's answers and the verdict a sampled episode would have.

`ScriptedEngine` stands where the policy's engine stands in `run_episodes`: at an episode's turn t
it "samples" the teacher's t-th written turn (its tokens, then the end-of-turn token), so the
episode's context, the environment tokens between turns (the chat template's), the loss mask (1 on
the teacher's tokens only) and the tool runs (the real sandbox) are exactly the rollout loop's.
`math_tool_traces` writes math-with-Python episodes (curation/tool_math.py: a program that computes
the answer, then the answer) and keeps the ones whose program printed the answer and whose answer
the math verifier passed: the SFT rows a small model learns the tool call from
(docs/multi-turn.md, "Tool traces from a teacher").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from passband.curation.catalog.math import MathSettings
from passband.curation.rows import quarantine
from passband.curation.suites.math_problems import MathProblem, render_answer
from passband.curation.suites.math_suite import AnswerFormat, render_prompt
from passband.curation.tool_math import answer_turn, call_turn, printed_answer, tool_program
from passband.training.engines.config import SamplingConfig
from passband.training.engines.protocol import Sample
from passband.training.episodes.math_python import MathPythonEnvironment, MathToolConfig
from passband.training.episodes.rollout import EpisodeResult, run_episodes
from passband.training.episodes.tokens import encode_text

EPISODES_AT_ONCE = 8
"""Teacher episodes run side by side (their sandboxed programs start together, each under the tool's
wall limit, so a batch the size of the machine's cores keeps them well inside it)."""


@dataclass
class ScriptedEngine:
    """A rollout engine whose samples are written turns: the episode keyed `key` (run_episodes' keys)
    gets `turns[key][t]` at its turn t, as tokens ending in the end-of-turn token, log-prob 0."""

    tokenizer: Any
    turns: dict[str, list[str]]
    name: str = "scripted"

    def generate(self, prompts: list[Any], sampling: SamplingConfig,
                 prompt_keys: list[str] | None = None) -> list[list[Sample]]:
        if prompt_keys is None or len(prompt_keys) != len(prompts):
            raise ValueError("a scripted engine answers keyed episode turns only (run_episodes' prompt_keys)")
        samples = []
        for index, key in enumerate(prompt_keys):
            episode, turn = key.rsplit("/turn", 1)
            written = self.turns[episode]
            if int(turn) >= len(written):
                raise ValueError(f"episode {episode!r} asked for turn {turn}; its script has {len(written)}")
            ids = encode_text(self.tokenizer, written[int(turn)]) + [self.tokenizer.eos_token_id]
            samples.append([Sample(prompt_index=index, sample_index=0, token_ids=ids, text=written[int(turn)],
                                   logprobs=[0.0] * len(ids), finish_reason="stop")])
        return samples


def _tool_output(result: EpisodeResult) -> str:
    """What the tool answered the episode's first call (empty when it was never run)."""
    return next((m["content"] for m in result.messages if m["role"] == "tool"), "")


def _why_not_kept(result: EpisodeResult, problem: MathProblem) -> str | None:
    if result.status != "pass":
        return f"episode {result.status}: {result.detail}" if result.detail else f"episode {result.status}"
    if result.num_tool_calls != 1:
        return f"{result.num_tool_calls} tool calls ran, the trace writes one"
    if not printed_answer(_tool_output(result), problem):
        return f"the program printed {_tool_output(result)!r}, not {render_answer(problem.answer)}"
    return None


def math_tool_traces(
    tokenizer: Any, drawn: list[tuple[tuple[int, str], MathProblem]], seed: int, answer_format: AnswerFormat,
    math_tool: MathToolConfig,
) -> tuple[list[dict], list[dict]]:
    """(kept rows, quarantined rows): one teacher episode per drawn problem, run in the
    math-with-Python environment of `math_tool` (its system message, tool limits and budget, as RL and
    evaluation run it) and graded with the math verifier in `answer_format`. A kept row holds the
    problem's columns, the last turn as `completion`, and the episode's exact tokens (`input_ids`,
    `loss_mask`: 1 on the teacher's tokens); a problem whose kind has no program, or whose episode did
    not pass with the program's output as the answer, comes back quarantined with the reason."""
    rows = [{"id": f"tool-{subdomain}-d{difficulty}-s{seed}-{i}", "task": "math", "subdomain": subdomain,
             "prompt": render_prompt(problem.question, answer_format), "reference": render_answer(problem.answer),
             "source": f"tool-math-d{difficulty}", "difficulty": difficulty, "origin": "teacher",
             "teacher": "template", "system": math_tool.environment.system}
            for i, ((difficulty, subdomain), problem) in enumerate(drawn)]
    programs = [tool_program(problem) for _, problem in drawn]
    quarantined = [quarantine(row, f"no program for math kind {problem.kind!r}")
                   for row, (_, problem), program in zip(rows, drawn, programs) if program is None]
    written = [(row, problem, program) for row, (_, problem), program in zip(rows, drawn, programs) if program]
    keys = [f"{row['id']}/0" for row, _, _ in written]
    engine = ScriptedEngine(tokenizer, {key: [call_turn(program), answer_turn(problem, answer_format)]
                                        for key, (_, problem, program) in zip(keys, written)})
    environment = MathPythonEnvironment(math_tool.environment, MathSettings(answer_format=answer_format))
    budget, sampling = math_tool.budget, SamplingConfig(n=1, max_tokens=math_tool.budget.episode_tokens)
    # a few episodes at a time: their tool runs start together, and each has its own wall limit
    results = [result for start in range(0, len(written), EPISODES_AT_ONCE)
               for result in run_episodes(engine, tokenizer,
                                          [environment.open(row) for row, _, _ in written[start:start + EPISODES_AT_ONCE]],
                                          keys[start:start + EPISODES_AT_ONCE], sampling, budget)]
    kept = []
    for (row, problem, _), result in zip(written, results, strict=True):
        reason = _why_not_kept(result, problem)
        if reason:
            quarantined.append(quarantine(row, reason))
            continue
        kept.append({**row, "completion": result.final_text, **result.token_columns()})
    return kept, quarantined
