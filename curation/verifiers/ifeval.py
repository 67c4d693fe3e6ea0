"""Instruction-following verifier: IFEval-style references checked in strict or loose mode.

A reference is `{"instructions": [{"id": "keywords:existence", "kwargs": {...}}, ...]}` with
ids and kwargs as in IFEval (checkers in `ifeval_checks`). Kwargs whose value is None are
dropped first: the Hugging Face copy of IFEval stores every kwarg of every type, None where
unused. The score is the fraction of instructions met; the status is "pass" iff all are met.
Every text can be checked, so there is no "unparsable" here: an empty or truncated
completion simply fails what it fails (an empty one fails everything, as in IFEval).
"""

import inspect
from typing import Any

from passband.curation.verifiers.ifeval_checks import CHECKERS, RELATIONS
from passband.curation.verifiers.result import VerifyResult

MODES = ("strict", "loose")


def loose_variants(text: str) -> list[str]:
    """IFEval's loose mode: the text with its first line, last line or both removed, each
    also with every "*" deleted (markdown emphasis), 8 variants in all, the original first."""
    lines = text.split("\n")
    cut = [text, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(),
           "\n".join(lines[1:-1]).strip()]
    return cut + [variant.replace("*", "") for variant in cut]


def validate_instruction(instruction: dict[str, Any]) -> None:
    """Raise ValueError unless the id is known and its kwargs fit the checker's signature."""
    if not isinstance(instruction, dict) or "id" not in instruction:
        raise ValueError(f"instruction must be an object with an 'id', got {instruction!r:.120}")
    instruction_id = instruction["id"]
    if instruction_id not in CHECKERS:
        raise ValueError(
            f"unknown instruction id {instruction_id!r}; known ids: {sorted(CHECKERS)}"
        )
    try:
        inspect.signature(CHECKERS[instruction_id]).bind("", **_kwargs(instruction))
    except TypeError as error:
        raise ValueError(f"instruction {instruction_id!r}: bad kwargs: {error}") from None
    for name in ("relation", "let_relation", "capital_relation"):
        relation = _kwargs(instruction).get(name, RELATIONS[0])
        if relation not in RELATIONS:
            raise ValueError(
                f"instruction {instruction_id!r}: {name} must be one of {RELATIONS}, "
                f"got {relation!r}"
            )


def reference_error(reference: object) -> str | None:
    """Why `reference` cannot be checked (so a caller can quarantine its row), or None."""
    instructions = reference.get("instructions") if isinstance(reference, dict) else None
    if not isinstance(instructions, list) or not instructions:
        return "reference needs a non-empty list 'instructions'"
    for instruction in instructions:
        try:
            validate_instruction(instruction)
        except ValueError as error:
            return str(error)
    return None


def check_instructions(
    text: str, instructions: list[dict[str, Any]], mode: str = "strict"
) -> list[bool]:
    """One bool per instruction: is it met by `text` (strict) or by any loose variant?"""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    variants = [text] if mode == "strict" else loose_variants(text)
    results = []
    for instruction in instructions:
        validate_instruction(instruction)
        checker, kwargs = CHECKERS[instruction["id"]], _kwargs(instruction)
        # As in IFEval, an empty (all-whitespace) variant never counts as following.
        results.append(any(v.strip() and checker(v, **kwargs) for v in variants))
    return results


def verify_ifeval(
    completions: list[str], references: list[dict[str, Any]], mode: str = "strict"
) -> list[VerifyResult]:
    """Check each completion against its reference's instructions.

    detail lists each instruction as "id=1" (met) or "id=0", comma-separated, in order.
    """
    if len(completions) != len(references):
        raise ValueError(
            f"{len(completions)} completions but {len(references)} references; need one each"
        )
    results = []
    for row, (text, reference) in enumerate(zip(completions, references, strict=True)):
        problem = reference_error(reference)
        if problem is not None:
            raise ValueError(f"row {row}: {problem}")
        instructions = reference["instructions"]
        met = check_instructions(text, instructions, mode)
        detail = ",".join(f"{i['id']}={int(ok)}" for i, ok in zip(instructions, met, strict=True))
        results.append(VerifyResult(
            score=sum(met) / len(met), status="pass" if all(met) else "fail", detail=detail
        ))
    return results


def _kwargs(instruction: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (instruction.get("kwargs") or {}).items() if v is not None}
