"""`passband rollouts`: an RL run's kept rollouts (tasks/steps/rollouts_log.py), filtered, for a terminal."""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 400
"""Characters of each completion printed without --full."""


def selected(rows: list[dict[str, Any]], iteration: int | None, task: str | None, status: str | None) -> list[dict]:
    """The rows of that iteration, task and verifier status (None: any)."""
    return [row for row in rows if (iteration is None or row["iteration"] == iteration)
            and (task is None or row["task"] == task) and (status is None or row["status"] == status)]


def render(rows: list[dict[str, Any]], full: bool) -> str:
    """Each rollout as a header line (iteration, task, prompt, sample, status, score, advantage,
    tokens, finish reason, the episode's turns when more than one) and its completion, indented."""
    blocks = []
    for row in rows:
        text = row["completion"] if full or len(row["completion"]) <= SHOWN_CHARS else \
            row["completion"][:SHOWN_CHARS] + " [...]"
        header = (f"iteration {row['iteration']} {row['task']} {row['prompt_id']} sample {row['sample_index']}: "
                  f"{row['status']} score {row['score']:.2f} advantage {row['advantage']:+.3f} "
                  f"{row['num_tokens']} tokens ({row['finish_reason']})"
                  + (f", {row['num_turns']} turns" if (row.get("num_turns") or 1) > 1 else ""))
        detail = f"\n  detail: {row['detail']}" if row["detail"] else ""
        blocks.append(header + detail + "\n" + "\n".join("    " + line for line in text.splitlines() or [""]))
    return "\n\n".join(blocks)
