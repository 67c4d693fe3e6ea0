"""Read a verifier's (or meta-verifier's) output: the analysis between its two fixed phrases, and
the score in the one \\boxed{} that follows the second.

Anything else is unparsable, with the reason: a missing phrase, phrases out of order, no box or
more than one after the score phrase, an empty or unclosed box, or a score other than 0, 0.5 or 1
(0.7, "½", full-width digits). The box is read by the math verifier's extractor, which balances
braces; the score must be written in ASCII: 0, 1, 0.5, .5, 1.0, 1/2 or \\frac{1}{2}.
"""

import re
from dataclasses import dataclass
from fractions import Fraction

from passband.curation.grading.texts import EVALUATION_PHRASE, SCORE_PHRASE
from passband.curation.verifiers.math import extract_answer

GRADES = (Fraction(0), Fraction(1, 2), Fraction(1))

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Between the score phrase and its box: spaces, bold/italic stars, a math delimiter.
_LEAD_IN = re.compile(r"[\s*_]*(?:\$\$?|\\\(|\\\[)?\s*")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")
_SLASH = re.compile(r"([0-9]+)\s*/\s*([0-9]+)")
_FRAC = re.compile(r"\\d?frac\s*\{\s*([0-9]+)\s*\}\s*\{\s*([0-9]+)\s*\}")
_ISSUE = re.compile(r"issue in step\s*(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """One output, read. `score` is None exactly when the output is unparsable; `problem` then says why."""

    score: Fraction | None
    analysis: str  # the text between the two phrases, stripped ("" when a phrase is missing)
    problem: str = ""


def parse_verdict(text: str, opening: str = EVALUATION_PHRASE, closing: str = SCORE_PHRASE) -> Verdict:
    """The analysis and score of `text`; the meta-verifier's output is read with its own phrases."""
    start = text.find(opening)
    if start < 0:
        return Verdict(None, "", f"missing the phrase {opening!r}")
    end = text.rfind(closing)
    if end < 0:
        return Verdict(None, "", f"missing the phrase {closing!r}")
    if end < start + len(opening):
        return Verdict(None, "", f"the phrase {closing!r} comes before {opening!r}")
    analysis = text[start + len(opening):end].strip()
    after = text[end + len(closing):]
    boxes = len(_BOX.findall(after))
    if boxes != 1:
        return Verdict(None, analysis, f"{boxes} boxes after the score phrase; one \\boxed{{}} expected")
    if not _BOX.match(after, _LEAD_IN.match(after).end()):
        return Verdict(None, analysis, "text between the score phrase and its \\boxed{}")
    content = extract_answer(after, "boxed")
    if content is None:
        return Verdict(None, analysis, "the \\boxed{} after the score phrase is empty or unclosed")
    score = _grade(content)
    if score is None:
        return Verdict(None, analysis, f"score {content!r:.40} is not 0, 0.5 or 1")
    return Verdict(score, analysis)


def _grade(content: str) -> Fraction | None:
    """0, 1/2 or 1 from a box's content; None for anything else."""
    content = content.strip().strip("$").strip()
    value = None
    if _DECIMAL.fullmatch(content):
        value = Fraction(content)
    elif match := _SLASH.fullmatch(content) or _FRAC.fullmatch(content):
        value = Fraction(int(match[1]), int(match[2])) if int(match[2]) else None
    return value if value in GRADES else None


def issue_steps(analysis: str) -> list[int]:
    """The step numbers of the issues an analysis names ("Issue in step K: ..."), in order, once each."""
    return list(dict.fromkeys(int(number) for number in _ISSUE.findall(analysis)))
