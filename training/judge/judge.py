"""The judge runner: a live engine on the judge's checkpoint, sampling analyses of rollouts by the
rubric and, for scaled verification, meta-reviews of the low ones (docs/recipe.md section 9).

The engine is opened by the caller, which owns its lifetime (a flow, or a worker holding it
across jobs); the runner only generates and reads. Every prompt is seeded by its content (the
problem and the rollout, plus the analysis for a review), so a rollout's judgement does not
depend on its batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from passband.curation.grading.judged import (mean_verdict, needs_review, read_analyses, read_reviews,
                                              scaled_verdict, scores_of)
from passband.curation.grading.texts import grading_prompt, meta_prompt
from passband.curation.verifiers.result import VerifyResult
from passband.training.chat import Messages, render_prompt
from passband.training.engines.protocol import RolloutEngine
from passband.training.judge.config import JudgeConfig, ScaledAggregation


@dataclass(frozen=True)
class Judgement:
    """The judge's verdict on one rollout, and the texts it came from."""

    result: VerifyResult
    analyses: list[str]
    """The n analyses, as generated."""
    scores: list[float | None]
    """Each analysis's score (None: unparsable)."""
    reviews: list[list[str]]
    """Meta-reviews of each analysis (empty unless scaled and the analysis scored below 1)."""
    review_grades: list[list[float | None]]
    """Each review's grade of its analysis (None: unparsable)."""

    @property
    def num_samples(self) -> int:
        """Judge generations this verdict cost: analyses and meta-reviews."""
        return len(self.analyses) + sum(map(len, self.reviews))


def content_key(*parts: str) -> str:
    """A prompt key from its content: 16 hex of a blake2b over the parts."""
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=8).hexdigest()


def problem_text(prompt: str | Messages) -> str:
    """The task's prompt as the rubric's "Problem": a chat prompt becomes its turns, one per paragraph."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(f"{message['role']}: {message['content']}" for message in prompt)


class Judge:
    """Scores rollouts with a model: `grade(problems, solutions)`, one Judgement per pair."""

    def __init__(self, config: JudgeConfig, engine: RolloutEngine, tokenizer: Any) -> None:
        self.config = config
        self.engine = engine
        self.tokenizer = tokenizer

    def _generate(self, texts: list[str], keys: list[str], n: int) -> list[list[str]]:
        prompts = [render_prompt(self.tokenizer, text, self.config.system_prompt) for text in texts]
        sampling = self.config.sampling.model_copy(update={"n": n})
        return [[sample.text for sample in group] for group in self.engine.generate(prompts, sampling, keys)]

    def grade(self, prompts: list[str | Messages], solutions: list[str]) -> list[Judgement]:
        """prompts[i] is the task's prompt, solutions[i] the rollout; one generate call for the
        analyses and, with scaled verification, one for the reviews."""
        problems = [problem_text(prompt) for prompt in prompts]
        if len(problems) != len(solutions):
            raise ValueError(f"judge got {len(problems)} problems and {len(solutions)} solutions; need one of each")
        if not problems:
            return []
        texts = self._generate([grading_prompt(p, s) for p, s in zip(problems, solutions)],
                               [content_key(p, s) for p, s in zip(problems, solutions)], self.config.sampling.n)
        analyses = [read_analyses(group) for group in texts]
        aggregation = self.config.aggregation
        reviews: list[list[list[str]]] = [[[] for _ in group] for group in texts]
        if isinstance(aggregation, ScaledAggregation):
            low = [(i, j) for i, group in enumerate(analyses) for j, verdict in enumerate(group) if needs_review(verdict)]
            if low:
                reviewed = self._generate([meta_prompt(problems[i], solutions[i], texts[i][j]) for i, j in low],
                                          [content_key(problems[i], solutions[i], texts[i][j]) for i, j in low],
                                          aggregation.num_reviews)
                for (i, j), group in zip(low, reviewed, strict=True):
                    reviews[i][j] = group
        judgements = []
        for group, verdicts, group_reviews in zip(texts, analyses, reviews, strict=True):
            read = [read_reviews(r) for r in group_reviews]
            result = (scaled_verdict(verdicts, read, aggregation.k) if isinstance(aggregation, ScaledAggregation)
                      else mean_verdict(verdicts))
            judgements.append(Judgement(result, group, scores_of(verdicts), group_reviews, [scores_of(r) for r in read]))
        return judgements
