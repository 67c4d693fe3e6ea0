"""The logger every tasks/ module writes progress to.

Inside a Prefect flow or task run it is that run's logger, so the lines reach the Prefect UI
with the run they belong to; outside one (a script, a unit test) a plain `passband` logger.
"""

from __future__ import annotations

import logging


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.logging import get_logger, get_run_logger

    if FlowRunContext.get() is not None or TaskRunContext.get() is not None:
        return get_run_logger()
    return get_logger("passband")
