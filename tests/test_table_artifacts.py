"""Prefect table artifacts show floats at 4 significant digits, not 17; other cells unchanged."""

from __future__ import annotations

import prefect.artifacts

from passband.tasks.reporting.prefect_artifacts import publish_table


def test_table_cells_show_four_significant_digits(monkeypatch):
    published = []
    monkeypatch.setattr(prefect.artifacts, "create_table_artifact",
                        lambda rows, description: published.append((rows, description)))
    publish_table([{"checkpoint": "rl", "pass@1": 0.23958333333333334, "ci_low": 0.000123456789,
                    "delta": -0.06250000000000003, "n": 96, "big": 1234567.0, "ok": True}], "a table")
    (rows, description), = published
    assert description == "a table"
    assert rows == [{"checkpoint": "rl", "pass@1": 0.2396, "ci_low": 0.0001235, "delta": -0.0625, "n": 96,
                     "big": 1235000.0, "ok": True}]
