"""What the Prefect UI shows of a run beside its logs: markdown and table artifacts on the current flow run."""

from __future__ import annotations


def publish_markdown(text: str, description: str) -> None:
    """A markdown artifact on the current Prefect flow run (e.g. the pipeline's results table)."""
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(text, description=description)


def publish_table(rows: list[dict], description: str) -> None:
    """A table artifact on the current Prefect flow run, floats at 4 significant digits (the UI would
    print all 17); the stored tables keep full precision."""
    from prefect.artifacts import create_table_artifact

    create_table_artifact([{key: _display(value) for key, value in row.items()} for row in rows],
                          description=description)


def _display(value: object) -> object:
    """`value` as a table cell shows it: a float to 4 significant digits, anything else as is."""
    return float(f"{value:.4g}") if isinstance(value, float) else value
