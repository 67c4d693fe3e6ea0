"""Instruction-following verifier: IFEval-style references checked in strict or loose mode.

A reference is `{"instructions": [{"id": "keywords:existence", "kwargs": {...}}, ...]}` with
ids and kwargs as in IFEval (checkers in `ifeval_checks`). Kwargs whose value is None are
dropped first: the Hugging Face copy of IFEval stores every kwarg of every type, None where
unused. The score is the fraction of instructions met; the status is "pass" iff all are met.
Every text can be checked, so there is no "unparsable" here: an empty or truncated
completion simply fails what it fails (an empty one fails everything, as in IFEval).
"""

import difflib
import typing
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


# id -> {kwarg name: the type its checker takes} (int, str or list[str]), read once from the
# checkers' own signatures so a wrong kwarg is refused when a row loads, not mid-run.
KWARG_TYPES: dict[str, dict[str, Any]] = {
    instruction_id: {name: hint for name, hint in typing.get_type_hints(checker).items()
                     if name not in ("text", "return")}
    for instruction_id, checker in CHECKERS.items()
}
# Kwargs that name a relation, and the least value of an int kwarg (a count may be 0;
# nth_paragraph is 1-based and a negative one would index from the end).
RELATION_KWARGS = ("relation", "let_relation", "capital_relation")
MIN_INT = {"nth_paragraph": 1}
# Google's IFEval ids with no checker here, and why: a row that asks for one is quarantined with
# this reason when it loads (the google/IFEval benchmark's 541 rows lose those that use it).
UNCHECKED = {"language:response_language": "IFEval checks it with langdetect, a language detector passband "
                                           "does not ship"}


def validate_instruction(instruction: dict[str, Any]) -> None:
    """Raise ValueError unless the id is known and its kwargs are the names, types and values
    its checker takes (the message names the id and the kwarg)."""
    if not isinstance(instruction, dict) or "id" not in instruction:
        raise ValueError(f"instruction must be an object with an 'id', got {instruction!r:.120}")
    instruction_id = instruction["id"]
    if isinstance(instruction_id, str) and instruction_id in UNCHECKED:
        raise ValueError(f"instruction id {instruction_id!r} is not checked here: {UNCHECKED[instruction_id]}")
    if not isinstance(instruction_id, str) or instruction_id not in CHECKERS:
        close = difflib.get_close_matches(str(instruction_id), CHECKERS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known ids: {sorted(CHECKERS)}"
        raise ValueError(f"unknown instruction id {instruction_id!r:.80}; {hint}")
    if not isinstance(instruction.get("kwargs") or {}, dict):
        raise ValueError(f"instruction {instruction_id!r}: kwargs must be an object, "
                         f"got {type(instruction['kwargs']).__name__}")
    types, kwargs = KWARG_TYPES[instruction_id], _kwargs(instruction)
    takes = ", ".join(f"{name}: {_type_name(hint)}" for name, hint in types.items()) or "no kwargs"
    unknown, missing = sorted(set(kwargs) - set(types)), [name for name in types if name not in kwargs]
    if unknown or missing:
        problems = ([f"unknown {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])
        raise ValueError(f"instruction {instruction_id!r}: bad kwargs: {'; '.join(problems)} (it takes {takes})")
    for name, value in kwargs.items():
        if not _fits(value, types[name]):
            raise ValueError(f"instruction {instruction_id!r}: kwarg {name!r} must be {_type_name(types[name])}, "
                             f"got {value!r:.80} ({type(value).__name__})")
        if types[name] is int and value < MIN_INT.get(name, 0):
            raise ValueError(f"instruction {instruction_id!r}: kwarg {name!r} must be >= {MIN_INT.get(name, 0)}, "
                             f"got {value}")
        if name in RELATION_KWARGS and value not in RELATIONS:
            raise ValueError(f"instruction {instruction_id!r}: {name} must be one of {RELATIONS}, got {value!r:.80}")


def reference_error(reference: object) -> str | None:
    """Why `reference` cannot be checked (so a caller can quarantine its row), or None."""
    instructions = reference.get("instructions") if isinstance(reference, dict) else None
    if not isinstance(instructions, list) or not instructions:
        return "reference needs a non-empty list 'instructions'"
    for index, instruction in enumerate(instructions):
        try:
            validate_instruction(instruction)
        except ValueError as error:
            return f"instructions[{index}]: {error}"
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


def _fits(value: object, hint: Any) -> bool:
    """Is `value` (parsed JSON) of the checker's type (int, str, list[str])? JSON's true is no
    count, so a bool is not an int here; nor is 3.0 (nth_paragraph indexes a list)."""
    if typing.get_origin(hint) is list:
        (item_hint,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(item, item_hint) for item in value)
    return isinstance(value, hint) and not (isinstance(value, bool) and hint is not bool)


def _type_name(hint: Any) -> str:
    """"int", "str", "list[str]"."""
    return str(hint) if typing.get_origin(hint) else hint.__name__
