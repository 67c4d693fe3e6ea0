"""The recipe's four verification checks on one generated trace, as `verdict_<check>` columns.

Each verdict is "pass", "fail" or "not_applicable" (curation.sft_select.combine_verdicts reads
them; a check that applies to the task but says "not_applicable" counts as failed there).

- consistency: the answer addresses the query. Our definitions, per task:
  - math: a final answer is found by the prompt's extraction rule, and when the reference is a
    number the answer is a number too (an integer, decimal, a/b or \\frac{a}{b});
  - code: the fenced block the verifier runs (the last one defining the reference's entry point,
    else the last one) parses as Python and defines the entry point as a top-level function (any
    parsable block when the reference names no entry point);
  - ifeval: the response is non-empty and on topic: it shares at least `min_topic_words` content
    words (4+ letters, not a stop word or an instruction word) with the prompt;
  - a task of the user's (docs/your-reward.md): not_applicable, as are execution and math; its own
    verifier's `pass` is what a trace is selected by, with the structure check's generic half.
- execution (code only): the verifier's sandbox run of the tests passed.
- math (math only): the verifier found the final answer equivalent to the reference.
- structure: curation.verifiers.structure.check_structure under the task's StructureSpec
  (sections, final answer, not truncated, no repetition loops, length); a user's task and ifeval
  require no final-answer format.
"""

import ast
import re

from passband.curation.catalog import TASKS
from passband.curation.verifiers.code import extract_code
from passband.curation.verifiers.math import extract_answer
from passband.curation.verifiers.structure import StructureSpec, check_structure

_WORD = re.compile(r"[a-z]{4,}")
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_LATEX_FRACTION = re.compile(r"-?\\d?frac\{-?\d+\}\{\d+\}")
_CODE_BLOCK_REGEX = r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```"

# Words that say how to answer rather than what about: sharing them is not being on topic.
_NOT_TOPIC = frozenset(
    "about also answer being confirm contain could describe does each entire entirely exact "
    "exactly explain finish following format give have include including keyword keywords "
    "least less letter letters like more most must nothing other paragraph paragraphs phrase "
    "please post response sentence sentences short should some start than that their them "
    "then there these they this those times using what when which while with without word "
    "words would write your".split()
)


def structure_spec_for(task: str, math_rule: str = "last_number",
                       sections: tuple[tuple[str, str], ...] = ()) -> StructureSpec:
    """The structure a trace of `task` must have.

    No <think> section by default (the demo model writes none; pass `sections` to require one).
    The final answer is found by the math extraction rule for math, a fenced code block for code,
    and not required for instruction following, whose format is the instructions themselves.
    """
    if task == "math":
        return StructureSpec(sections=sections, answer_mode=math_rule)
    if task == "code":
        return StructureSpec(sections=sections, answer_mode="regex", answer_regex=_CODE_BLOCK_REGEX)
    if task == "ifeval" or task not in TASKS:  # a task of the user's: its verifier reads its own answer format
        return StructureSpec(sections=sections, answer_mode="none")
    raise ValueError(f"structure_spec_for: task must be math, code, ifeval or one of your own, got {task!r}")


def is_number(text: str) -> bool:
    """Whether `text` (stripped, `$` and `,` thousands kept) is one number or a LaTeX fraction."""
    stripped = text.strip().strip("$").strip()
    return bool(_NUMBER.fullmatch(stripped) or _LATEX_FRACTION.fullmatch(stripped))


def topic_words(text: str) -> set[str]:
    """Lower-cased words of 4+ letters that are not instruction words."""
    return set(_WORD.findall(text.lower())) - _NOT_TOPIC


def consistency(task: str, prompt: str, completion: str, reference, math_rule: str = "last_number",
                min_topic_words: int = 1) -> tuple[str, str]:
    """(verdict, reason) of the consistency check (definitions in the module docstring)."""
    if task == "math":
        answer = extract_answer(completion, math_rule)
        if answer is None:
            return "fail", f"no final answer by rule {math_rule!r}"
        if is_number(str(reference)) and not is_number(answer):
            return "fail", f"answer {answer[:40]!r} is not a number, reference {reference!r} is"
        return "pass", f"answer {answer[:40]!r}"
    if task == "code":
        entry_point = reference.get("entry_point") if isinstance(reference, dict) else None
        code = extract_code(completion, entry_point=entry_point)
        if code is None:
            return "fail", "no code block"
        try:
            tree = ast.parse(code)
        except SyntaxError as error:
            return "fail", f"code does not parse: {error.msg} (line {error.lineno})"
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
        if entry_point and entry_point not in defined:
            return "fail", f"entry point {entry_point!r} not defined (defines {sorted(defined)})"
        return "pass", f"defines {sorted(defined)}"
    if task == "ifeval":
        if not completion.strip():
            return "fail", "empty response"
        shared = topic_words(prompt) & topic_words(completion)
        if len(shared) < min_topic_words:
            return "fail", f"{len(shared)} topic words shared with the prompt (< {min_topic_words})"
        return "pass", f"shares {sorted(shared)[:5]}"
    if task not in TASKS:
        return "not_applicable", "a task of your own: its verifier is the judge of its answers"
    raise ValueError(f"consistency: task must be math, code, ifeval or one of your own, got {task!r}")


def four_verdicts(task: str, prompt: str, completion: str, reference, status: str,
                  finish_reason: str | None, spec: StructureSpec, math_rule: str = "last_number",
                  min_topic_words: int = 1) -> dict[str, str]:
    """The verdict_* columns of one trace plus the reasons of consistency and structure.

    `status` is the task verifier's status for this trace (pass/fail/unparsable/timeout/error):
    it decides execution for code and math correctness for math.
    """
    consistency_verdict, consistency_reason = consistency(
        task, prompt, completion, reference, math_rule, min_topic_words)
    verifier_verdict = "pass" if status == "pass" else "fail"
    report = check_structure(completion, finish_reason, spec)
    return {
        "verdict_consistency": consistency_verdict,
        "verdict_execution": verifier_verdict if task == "code" else "not_applicable",
        "verdict_math": verifier_verdict if task == "math" else "not_applicable",
        "verdict_structure": "pass" if report.ok else "fail",
        "consistency_detail": consistency_reason,
        "structure_detail": "; ".join(f"{name}: {report.reasons[name]}" for name in report.failed()),
    }


def with_verdicts(problems: list[dict], samples: list[dict], math_rule: str,
                  sections: tuple[tuple[str, str], ...], min_topic_words: int) -> list[dict]:
    """Samples (rows with `problem_id`, `completion`, `status`, `finish_reason`) with the four verdict
    columns of four_verdicts added, each checked against its problem's task, prompt and reference."""
    by_id = {row["id"]: row for row in problems}
    verdicts = []
    for sample in samples:
        problem = by_id[sample["problem_id"]]
        spec = structure_spec_for(problem["task"], math_rule, sections)
        verdicts.append({**sample, **four_verdicts(
            problem["task"], problem["prompt"], sample["completion"], problem["reference"], sample["status"],
            sample["finish_reason"], spec, math_rule, min_topic_words)})
    return verdicts
