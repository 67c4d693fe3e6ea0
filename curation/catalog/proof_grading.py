"""Proof grading: a verifier model reads a rubric, a problem X and a solution Y, writes an analysis
and scores Y 0, 0.5 or 1; its reward is R_format x (1 - |s' - s|) against the label s
(docs/recipe.md section 9), so curation, SFT and RL train a verifier with no loop of their own.

The suite is generated triples with known defects (curation/grading/triples.py); user-labelled
triples load through the loaders as {problem, solution, score} rows (or with a rendered prompt and a
{"score": s} reference).
"""

from typing import Any

from pydantic import Field

from passband.curation.bands import BandFilter
from passband.curation.catalog.task import EvalDefaults, Options, Task
from passband.curation.grading.labels import DefectKind, reference_error
from passband.curation.grading.reward import MetaReward, Unformatted, verify_grading
from passband.curation.grading.texts import grading_prompt
from passband.curation.grading.triples import DEFECT_CYCLE, generate_triples
from passband.curation.verifiers.result import VerifyResult


class ProofGradingSettings(Options):
    """How a verifier's analysis is rewarded."""

    meta: MetaReward = "off"
    """R_meta, the third factor of the reward: "off" (1), or "defect_check": the analysis must
    name the step of the defect a generated triple records, and only it (0, 0.5 or 1;
    curation/grading/meta.py). Needs references that record a defect."""
    unformatted: Unformatted = "unparsable"
    """The status of an output without the two fixed phrases and one score: "unparsable", masked
    out of the RL gradient as every task's unreadable output; "fail", rewarded 0 (R_format)."""


class ProofGradingSuiteOptions(Options):
    """Options of the generated triples beyond (num_problems, seed, difficulty 0-2)."""

    subdomains: list[str] | None = None
    """Math sub-domains the problems come from (None: all five)."""
    defects: list[DefectKind] = Field(list(DEFECT_CYCLE), min_length=1)
    """Defect kinds, one per row in turn; the default gives each score a third of the rows."""
    balanced: bool = True
    """Every sub-domain gets an equal share (an error when one runs out of distinct questions)."""


class ProofGradingTask(Task):
    name = "proof_grading"
    Settings = ProofGradingSettings
    SuiteOptions = ProofGradingSuiteOptions
    # As math: drop triples every analysis already scores right, and those none does.
    default_band = BandFilter.parse("(0, 0.8]")
    # An analysis is longer than an answer: one line per issue, then the score.
    eval_defaults = EvalDefaults(num_problems=18, difficulty=0, n=4, max_tokens=384)
    verifier = staticmethod(verify_grading)

    def problems(self, num_problems: int, seed: int, difficulty: int | str,
                 options: ProofGradingSuiteOptions) -> list[dict]:
        return generate_triples(num_problems, seed, int(difficulty), options.subdomains, options.defects,
                                options.balanced)

    def verify(self, completions: list[str], references: list, settings: ProofGradingSettings) -> list[VerifyResult]:
        return verify_grading(completions, references, meta=settings.meta, unformatted=settings.unformatted)

    def reference_error(self, reference: object) -> str | None:
        return reference_error(reference)

    def assemble(self, row: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """A {problem, solution, score} row gets its prompt rendered and {"score": s} as its reference."""
        if "prompt" not in row:
            missing = [key for key in ("problem", "solution") if not isinstance(row.get(key), str)]
            if missing:
                return None, f"proof_grading needs str {' and '.join(map(repr, missing))} (or a rendered 'prompt')"
            row = {**row, "prompt": grading_prompt(row["problem"], row["solution"])}
        if "reference" not in row:
            if "score" not in row:
                return None, "proof_grading needs a label: 'score' (0, 0.5 or 1) or a 'reference' {\"score\": s}"
            row = {**{key: value for key, value in row.items() if key != "score"}, "reference": {"score": row["score"]}}
        return row, None


PROOF_GRADING = ProofGradingTask()
