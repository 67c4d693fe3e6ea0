"""Math verifier: extract the final answer from a completion, decide equivalence with math-verify.

Extraction is ours (a setting: last \\boxed{}, last number, or <answer> tag) so that "no answer
found" is reported as `unparsable`; equivalence (fractions, decimals, LaTeX, expressions, sets,
intervals, units) is math-verify's, never a hand-written CAS.
"""

import re
import threading

from passband.curation.verifiers.result import VerifyResult

RULES = ("boxed", "last_number", "answer_tag")

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Thousands separators only in groups of exactly 3 digits, so "1, 2, 3" yields "3", not "1,2,3".
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_answer(text: str, rule: str = "boxed") -> str | None:
    """The final answer in `text` by `rule`, stripped; None when there is none (or it is empty)."""
    if rule == "boxed":
        answer = _last_boxed(text)
    elif rule == "last_number":
        numbers = _NUMBER.findall(text)
        answer = numbers[-1].replace(",", "") if numbers else None
    elif rule == "answer_tag":
        tags = _ANSWER_TAG.findall(text)
        answer = tags[-1] if tags else None
    else:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if answer is None or not answer.strip():
        return None
    return answer.strip()


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} or \\fbox{...}, braces balanced; `\\boxed 5` gives "5".

    An unclosed box (output truncated mid-answer) gives None. Escaped braces (\\{ \\}) are
    literal set braces and do not count toward the balance.
    """
    matches = list(_BOX_COMMAND.finditer(text))
    if not matches:
        return None
    start = matches[-1].end()
    rest = text[start:]
    if not rest.lstrip().startswith("{"):
        # LaTeX's one-token argument: "\boxed 5$" -> "5" (the token ends at space or $).
        token = re.match(r"\s+([^\s$]+)", rest)
        return token.group(1) if token else None
    open_at = start + rest.index("{")
    depth = 0
    i = open_at
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # skip the escaped character, e.g. \{ or \}
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
        i += 1
    return None


def reference_error(reference: object) -> str | None:
    """Why `reference` is not a valid math reference (a non-empty string or a number), or None."""
    if isinstance(reference, bool) or not isinstance(reference, (str, int, float)):
        return f"reference must be a string or number, got {type(reference).__name__}"
    if not str(reference).strip():
        return "reference is empty"
    return None


def verify_math(
    completions: list[str],
    references: list[str | int | float],
    rule: str = "boxed",
    timeout_s: int | None = 5,
) -> list[VerifyResult]:
    """Score each completion 1/0 against its reference answer (a LaTeX or plain string).

    timeout_s bounds math-verify's parse and compare with signal.alarm, which only works in the
    main thread; in any other thread (Prefect runs tasks in worker threads) it is switched off,
    as math-verify requires. A parse that times out counts as unparsable, a compare as fail.
    """
    from math_verify import parse, verify  # sympy import costs ~1 s; keep the CLI fast

    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    in_main_thread = threading.current_thread() is threading.main_thread()
    timeout = timeout_s if in_main_thread else None
    results = []
    for index, reference in enumerate(references):
        error = reference_error(reference)
        if error is not None:
            raise ValueError(f"reference {index}: {error}")
    for completion, reference in zip(completions, references):
        answer = extract_answer(completion, rule)
        if answer is None:
            results.append(VerifyResult(0.0, "unparsable", f"no answer found by rule {rule!r}"))
            continue
        # Both sides go through the same \boxed wrapper so that math-verify's LaTeX parser sees
        # exactly the extracted answer (and strips units, \text, \dfrac, ... the same way).
        gold = parse(f"$\\boxed{{{reference}}}$", parsing_timeout=timeout)
        predicted = parse(f"$\\boxed{{{answer}}}$", parsing_timeout=timeout)
        if not gold:
            results.append(VerifyResult(0.0, "error", f"reference {reference!r} not parsable"))
        elif not predicted:
            results.append(VerifyResult(0.0, "unparsable", f"answer {answer!r} not parsable"))
        elif verify(gold, predicted, timeout_seconds=timeout):
            results.append(VerifyResult(1.0, "pass", f"answer {answer!r}"))
        else:
            results.append(VerifyResult(0.0, "fail", f"answer {answer!r} != {reference!r}"))
    return results
