"""Structure checks for synthetic-data verification: is a generated trace well formed?

Each check is a pure function returning `(ok, reason)`; `check_structure` runs all of them
under one `StructureSpec` and records every result, so a rejected trace says why. A check
that the spec switches off is recorded as passed with the reason "not configured".
"""

import re
from dataclasses import dataclass, field

from passband.curation.verifiers.math import RULES as EXTRACTION_RULES
from passband.curation.verifiers.math import extract_answer

CHECK_NAMES = ("sections", "final_answer", "not_truncated", "no_repetition", "length")
ANSWER_MODES = (*EXTRACTION_RULES, "regex", "none")


@dataclass(frozen=True)
class StructureSpec:
    """What a well-formed completion looks like."""

    sections: tuple[tuple[str, str], ...] = (("<think>", "</think>"),)
    """(open, close) marker pairs that must each appear once in this order, with non-empty
    text between; () to require none."""
    answer_mode: str = "boxed"
    """How the final answer is found: a math extraction rule ("boxed": a non-empty
    \\boxed{...}; "last_number"; "answer_tag": <answer>...</answer>), "regex"
    (`answer_regex` matches), or "none" (no answer required)."""
    answer_regex: str = ""
    """Pattern searched (re.DOTALL) when answer_mode is "regex"; group 1, if any, must be
    non-empty."""
    answer_after_sections: bool = True
    """The final answer must come after the last section's close marker, so an answer
    written only inside <think> does not count."""
    closing_marker: str | None = None
    """If set, the text (trailing whitespace stripped) must end with it, e.g. "</answer>"."""
    ngram_size: int = 4
    """n of the word n-grams whose duplicate fraction is measured."""
    max_duplicate_ngram_fraction: float = 0.5
    """Fail when more than this fraction of word n-grams repeat an earlier one."""
    max_loop_words: int = 32
    """Longest block, in words, searched for back-to-back repetition."""
    max_consecutive_repeats: int = 3
    """Fail when a block of 1..max_loop_words words is followed by more than this many
    identical copies of itself (default: 4 copies in a row fail, 3 pass)."""
    min_chars: int = 1
    """Fewest characters allowed (after stripping outer whitespace)."""
    max_chars: int | None = None
    """Most characters allowed, or None for no bound."""
    min_tokens: int | None = None
    """Fewest completion tokens allowed (needs `num_tokens`), or None."""
    max_tokens: int | None = None
    """Most completion tokens allowed (needs `num_tokens`), or None."""

    def __post_init__(self) -> None:
        if self.answer_mode not in ANSWER_MODES:
            raise ValueError(f"answer_mode must be one of {ANSWER_MODES}, "
                             f"got {self.answer_mode!r}")
        if self.answer_mode == "regex" and not self.answer_regex:
            raise ValueError("answer_mode 'regex' needs a non-empty answer_regex")
        if self.ngram_size < 1 or self.max_loop_words < 1 or self.max_consecutive_repeats < 1:
            raise ValueError("ngram_size, max_loop_words and max_consecutive_repeats must be >= 1")


@dataclass(frozen=True)
class StructureReport:
    """Every check's verdict and reason, keyed by the names in CHECK_NAMES."""

    checks: dict[str, bool] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def failed(self) -> list[str]:
        """Names of the failed checks, in CHECK_NAMES order."""
        return [name for name in CHECK_NAMES if not self.checks[name]]


def check_sections(text: str, sections: tuple[tuple[str, str], ...]) -> tuple[bool, str]:
    """Each (open, close) pair appears in order with non-empty content between."""
    position = 0
    for open_marker, close_marker in sections:
        start = text.find(open_marker, position)
        if start < 0:
            return False, f"missing {open_marker!r}"
        end = text.find(close_marker, start + len(open_marker))
        if end < 0:
            return False, f"{open_marker!r} is never closed by {close_marker!r}"
        if not text[start + len(open_marker):end].strip():
            return False, f"empty {open_marker}...{close_marker} section"
        position = end + len(close_marker)
    return True, f"{len(sections)} section(s) found" if sections else "not configured"


def check_final_answer(text: str, mode: str, regex: str = "") -> tuple[bool, str]:
    """A final answer is present: by the math verifier's extraction rule ("boxed",
    "last_number", "answer_tag"), by `regex` ("regex"), or not required ("none")."""
    if mode == "none":
        return True, "not configured"
    if mode in EXTRACTION_RULES:
        answer = extract_answer(text, mode)
        return (False, f"no final answer by rule {mode!r}") if answer is None else (
            True, f"{mode}: {answer[:40]!r}")
    if mode == "regex":
        match = re.search(regex, text, flags=re.DOTALL)
        if match is None:
            return False, f"no match for {regex!r}"
        if match.groups() and not (match.group(1) or "").strip():
            return False, f"empty answer group in {regex!r}"
        return True, f"matched {match.group(0)[:40]!r}"
    raise ValueError(f"answer mode must be one of {ANSWER_MODES}, got {mode!r}")


def check_not_truncated(
    text: str, finish_reason: str | None, closing_marker: str | None = None
) -> tuple[bool, str]:
    """The engine did not stop on the length limit, and the text ends with the marker if set."""
    if finish_reason == "length":
        return False, "finish_reason is 'length' (hit the token limit)"
    if closing_marker is not None and not text.rstrip().endswith(closing_marker):
        return False, f"does not end with {closing_marker!r}"
    return True, f"finish_reason {finish_reason!r}"


def longest_loop(words: list[str], max_block: int) -> tuple[int, int]:
    """(block length, copies) of the most-copied back-to-back repeated block of words.

    For each period p <= max_block, a run of r consecutive positions with words[i] ==
    words[i + p] means the p-word block occurs 1 + r // p times in a row. O(len * max_block).
    """
    best_block, best_copies = 0, 1
    for block in range(1, max_block + 1):
        run = 0
        for index in range(len(words) - block):
            run = run + 1 if words[index] == words[index + block] else 0
            copies = 1 + run // block
            if copies > best_copies:
                best_block, best_copies = block, copies
    return best_block, best_copies


def duplicate_ngram_fraction(words: list[str], n: int) -> float:
    """Fraction of word n-grams equal to an earlier n-gram; 0.0 if there are none."""
    ngrams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1 - len(set(ngrams)) / len(ngrams) if ngrams else 0.0


def check_no_repetition(
    text: str, ngram_size: int, max_fraction: float, max_loop_words: int, max_repeats: int
) -> tuple[bool, str]:
    """No block of words repeats back to back more than `max_repeats` extra times, and at
    most `max_fraction` of word n-grams duplicate an earlier one. Words are whitespace-split
    and lowercased, punctuation kept ("2." and "2" differ)."""
    words = text.lower().split()
    block, copies = longest_loop(words, max_loop_words)
    if copies - 1 > max_repeats:
        return False, f"a {block}-word block repeats {copies} times in a row"
    fraction = duplicate_ngram_fraction(words, ngram_size)
    if fraction > max_fraction:
        return False, f"{fraction:.2f} of {ngram_size}-grams are duplicates (> {max_fraction})"
    return True, f"max {copies} copies in a row, {fraction:.2f} duplicate {ngram_size}-grams"


def check_length(
    text: str,
    num_tokens: int | None,
    min_chars: int = 1,
    max_chars: int | None = None,
    min_tokens: int | None = None,
    max_tokens: int | None = None,
) -> tuple[bool, str]:
    """Stripped character count and (if bounded) token count lie within the bounds."""
    num_chars = len(text.strip())
    if num_chars < min_chars:
        return False, f"{num_chars} chars < min {min_chars}"
    if max_chars is not None and num_chars > max_chars:
        return False, f"{num_chars} chars > max {max_chars}"
    if min_tokens is not None or max_tokens is not None:
        if num_tokens is None:
            raise ValueError("token bounds are set but num_tokens was not given")
        if min_tokens is not None and num_tokens < min_tokens:
            return False, f"{num_tokens} tokens < min {min_tokens}"
        if max_tokens is not None and num_tokens > max_tokens:
            return False, f"{num_tokens} tokens > max {max_tokens}"
    return True, f"{num_chars} chars" + ("" if num_tokens is None else f", {num_tokens} tokens")


def check_structure(
    text: str, finish_reason: str | None, spec: StructureSpec, num_tokens: int | None = None
) -> StructureReport:
    """Run every check of `spec` on one completion; `num_tokens` is needed for token bounds."""
    answer_region = text
    if spec.answer_after_sections and spec.sections:
        close_marker = spec.sections[-1][1]
        cut = text.rfind(close_marker)
        # No close marker: the sections check already fails; search nothing for the answer.
        answer_region = text[cut + len(close_marker):] if cut >= 0 else ""
    results = {
        "sections": check_sections(text, spec.sections),
        "final_answer": check_final_answer(answer_region, spec.answer_mode, spec.answer_regex),
        "not_truncated": check_not_truncated(text, finish_reason, spec.closing_marker),
        "no_repetition": check_no_repetition(
            text, spec.ngram_size, spec.max_duplicate_ngram_fraction, spec.max_loop_words,
            spec.max_consecutive_repeats,
        ),
        "length": check_length(
            text, num_tokens, spec.min_chars, spec.max_chars, spec.min_tokens, spec.max_tokens
        ),
    }
    return StructureReport(
        checks={name: ok for name, (ok, _) in results.items()},
        reasons={name: reason for name, (_, reason) in results.items()},
    )
