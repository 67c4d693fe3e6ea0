"""`passband verify`: verify a JSONL file of completions and write the verdicts back.

Input rows are {id, completion, reference}; output rows are the same with score, status and
detail added. Malformed rows (bad JSON, missing keys, a reference the task cannot use) are
written with their line number and reason to <output stem>.quarantine.jsonl, never dropped
silently: invalid UTF-8, JSON nested too deep to parse and huge lines included (the raw text
kept in the quarantine is cut at MAX_RAW_CHARS). Lines are split on "\n" only, so line numbers
match `sed -n Np`. Files are written to a temporary name and renamed, so a crash leaves no half
file. `exit_status` turns the counts into the command's exit status and `summary` into its one
stderr line; a file with no rows at all (empty, or blank lines only) is refused with NoRows and
nothing is written.

Each task's completions are read and scored as the flows score them: `Task.verify` with the task's
verifier settings (math's `answer_format` defaults to `plain`, the last number, as in every flow),
or by a reward server (`--reward-url`) as a flow's reward.verifiers.rewards entry scores them.
A bad task, setting or output folder raises ConfigError before any row is read.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import ValidationError

from passband.flows.config import ConfigError

from passband.curation.catalog.reward_function import NoSettings
from passband.curation.catalog.reward_server import RewardServer, RewardServerConfig

if TYPE_CHECKING:
    from passband.curation.catalog import Task
    from passband.curation.catalog.task import Options

REQUIRED_KEYS = ("id", "completion", "reference")
MAX_RAW_CHARS = 10_000
EXIT_QUARANTINED = 3
"""Exit status when some rows were quarantined (the others were still verified and written)."""
EXIT_NO_ROWS = 4
"""Exit status when the input has no rows: a script must not read an empty result as "all passed"."""


class NoRows(click.ClickException):
    """The input file has no rows (empty, or blank lines only): one `Error:` line, EXIT_NO_ROWS."""

    exit_code = EXIT_NO_ROWS


def exit_status(counts: dict[str, int]) -> int:
    """0 when every row was verified, EXIT_QUARANTINED when some rows were quarantined."""
    return EXIT_QUARANTINED if counts.get("quarantined") else 0


def quarantine_path(output_path: Path) -> Path:
    """Where the rows that could not be verified go: out.jsonl -> out.quarantine.jsonl."""
    return Path(output_path).with_suffix(".quarantine.jsonl")


def summary(counts: dict[str, int], output_path: Path) -> str:
    """The command's one stderr line: counts per status, and where quarantined rows went."""
    line = " ".join(f"{status}={count}" for status, count in counts.items())
    if not counts.get("quarantined"):
        return line
    quarantine = quarantine_path(output_path)
    if counts["quarantined"] == sum(counts.values()):
        # Every line bad is usually the wrong file or encoding (binary, UTF-16), not bad rows.
        return f"{line}: no row could be verified (is it JSONL in UTF-8?); line numbers and reasons in {quarantine}"
    return f"{line}; line numbers and reasons in {quarantine}"


def verify_file(task: str, input_path: Path, output_path: Path,
                settings: dict[str, Any] | None = None, server: RewardServerConfig | None = None) -> dict[str, int]:
    """Verify every well-formed row; return counts per status (plus "quarantined" if any).
    `settings` are fields of the task's verifier settings (math: {"answer_format": "boxed"});
    `server`: a reward server scores the rows instead, `task` being the name it is sent (as
    reward.verifiers.rewards.<task> in a flow); a server that fails every try raises
    RewardServerUnreachable in one line naming its URL, and nothing is written."""
    if server is not None and settings:
        raise ConfigError(f"{', '.join(settings)}: verifier settings, but a reward server scores these rows; drop them")
    checked, verifier_settings = task_settings(task, settings or {}) if server is None else (
        RewardServer(task, server), NoSettings())
    output_path = Path(output_path)
    if not output_path.parent.is_dir():
        raise ConfigError(f"-o {output_path}: no folder {output_path.parent}")
    rows, quarantined = _read_rows(checked, Path(input_path))
    if not rows and not quarantined:
        raise NoRows(f"{input_path}: no rows to verify (the file is empty or has only blank lines); "
                     f"nothing written")
    results = checked.verify([row["completion"] for row in rows], [row["reference"] for row in rows],
                             verifier_settings)
    verified = [{**row, "score": r.score, "status": r.status, "detail": r.detail}
                for row, r in zip(rows, results)]

    quarantine = quarantine_path(output_path)
    _write_jsonl(output_path, verified)
    if quarantined:
        _write_jsonl(quarantine, quarantined)
    elif quarantine.exists():
        quarantine.unlink()  # a stale one from an earlier run would describe other input

    counts = dict(Counter(r.status for r in results))
    if quarantined:
        counts["quarantined"] = len(quarantined)
    return counts


def task_settings(task: str, settings: dict[str, Any]) -> tuple[Task, Options]:
    """The task (a catalog task, or the user's by entry point or import path, under the verifier
    contract: curation/catalog/user.py) and its verifier settings; ConfigError naming the task or setting."""
    from passband.curation.catalog import TASKS, row_task  # heavy-ish: kept out of `passband --help`

    try:  # a user's task (entry point or import path) is refused in one line without the opt-in
        checked = row_task(task, declared=task)  # the command line declares it
    except ValueError as err:
        raise ConfigError(f"--task {task!r}: {err}") from err
    if checked is None:
        raise ConfigError(f"--task {task!r}: not a catalog task (tasks: {', '.join(TASKS)}), a passband.tasks "
                          "entry point or an import path module:attribute")
    try:
        return checked, checked.Settings.model_validate(settings)
    except ValidationError as err:
        fields = ", ".join(checked.Settings.model_fields) or "none"
        problems = "; ".join(
            f"the {task} verifier has no setting {'.'.join(map(str, e['loc']))}" if e["type"] == "extra_forbidden"
            else f"{task} verifier {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ConfigError(f"{problems} (its settings: {fields})") from err


def _read_rows(task: Task, path: Path) -> tuple[list[dict], list[dict]]:
    """Well-formed rows, and quarantine records {line, reason, raw} for the others."""
    rows, quarantined = [], []
    with open(path, "rb") as file:
        for line_number, data in enumerate(file, start=1):
            line = data.decode("utf-8", "replace")
            if not line.strip():
                continue
            row, reason = _parse(data)
            reason = reason or _row_error(task, row)
            if reason is None:
                rows.append(row)
            else:
                raw = line.rstrip("\n")
                quarantined.append({"line": line_number, "reason": reason,
                                    "raw": raw[:MAX_RAW_CHARS], "raw_chars": len(raw)})
    return rows, quarantined


def _parse(data: bytes) -> tuple[object, str | None]:
    """One line's JSON value, or (None, why it is not one)."""
    try:
        # utf-8-sig: a BOM that Windows editors put first is no part of the row. Decoding here
        # rather than in json.loads, which guesses UTF-16 or UTF-32 from NUL bytes at the start
        # and then raises a UnicodeDecodeError of its own.
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return None, f"not valid UTF-8: byte {error.start}"
    try:
        return json.loads(text), None
    except json.JSONDecodeError as error:
        return None, f"bad JSON: {error}"
    except RecursionError:
        return None, "bad JSON: nested too deeply to parse"


def _row_error(task: Task, row: object) -> str | None:
    """Why `row` cannot be verified for `task`, or None."""
    if not isinstance(row, dict):
        return f"row must be a JSON object, got {type(row).__name__}"
    missing = [key for key in REQUIRED_KEYS if key not in row]
    if missing:
        return f"missing keys: {', '.join(missing)}"
    if not isinstance(row["completion"], str):
        return "completion must be a string"
    reference = row["reference"]
    if task.text_reference and isinstance(reference, int | float) and not isinstance(reference, bool):
        reference = str(reference)  # a numeric answer is its decimal text (`verify` reads it so)
    return task.reference_error(reference)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    """Write to path.tmp, then rename over path (atomic on one filesystem)."""
    temporary = path.with_name(path.name + ".tmp")
    # A lone surrogate (valid JSON "\ud800") cannot be encoded as UTF-8; backslashreplace writes
    # it back as that same JSON escape, since it only ever occurs inside a string.
    with open(temporary, "w", encoding="utf-8", errors="backslashreplace") as file:
        for row in rows:
            file.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(temporary, path)
