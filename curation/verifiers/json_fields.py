"""Structured-output verifier: find the JSON object in a completion, check its fields.

A reference is `{"fields": {key: expected value}}`. The first text span that decodes as a JSON
object is the answer (models wrap it in ```json fences or add a sentence; both are fine); no
such span is `unparsable`, so a truncated or Python-dict-style answer is kept apart from a wrong
one. Each expected key scores when the object has it with an equal value: strings compare
case-insensitively after stripping, numbers numerically (a numeric string such as "30" counts
for 30: the fact is right, only its JSON type is loose). Keys not asked for are ignored. The
score is the fraction of keys right; the status is "pass" iff all are.
"""

import json
import re
from typing import Any

from passband.curation.verifiers.result import VerifyResult, check_batch

_DECODER = json.JSONDecoder()
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def extract_object(text: str) -> dict | None:
    """The first JSON object in `text` (scanning each "{" left to right), or None."""
    for start in (i for i, char in enumerate(text) if char == "{"):
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            continue  # not an object starting here: e.g. a brace in prose, or a truncated one
        if isinstance(value, dict):
            return value
    return None


def value_matches(got: Any, expected: str | int | float) -> bool:
    """Whether `got` states the expected value (see the module docstring for the rules)."""
    if isinstance(expected, bool) or isinstance(got, bool):  # bool is an int to Python, not to JSON
        return isinstance(got, bool) and isinstance(expected, bool) and got == expected
    if isinstance(expected, (int, float)):
        if isinstance(got, str) and _NUMBER.match(got.strip()):
            got = float(got)
        return isinstance(got, (int, float)) and float(got) == float(expected)
    return isinstance(got, str) and got.strip().casefold() == expected.strip().casefold()


def reference_error(reference: object) -> str | None:
    """Why `reference` is not a valid JSON-task reference, or None."""
    fields = reference.get("fields") if isinstance(reference, dict) else None
    if not isinstance(fields, dict) or not fields:
        return "structured reference needs a non-empty object 'fields'"
    for key, value in fields.items():
        if not isinstance(value, (str, int, float)):
            return f"structured reference field {key!r} must be a string or number, got {type(value).__name__}"
    return None


def verify_json(completions: list[str], references: list[dict]) -> list[VerifyResult]:
    """One result per completion; detail lists each key as "key=1" (right) or "key=0"."""
    check_batch(completions, references, reference_error)
    results = []
    for completion, reference in zip(completions, references, strict=True):
        answer = extract_object(completion)
        if answer is None:
            results.append(VerifyResult(0.0, "unparsable", "no JSON object found"))
            continue
        fields = reference["fields"]
        right = {key: key in answer and value_matches(answer[key], value) for key, value in fields.items()}
        results.append(VerifyResult(
            score=sum(right.values()) / len(right),
            status="pass" if all(right.values()) else "fail",
            detail=",".join(f"{key}={int(ok)}" for key, ok in right.items()),
        ))
    return results
