"""How ``geneval`` logs: short lines on stderr, results on stdout (docs/getting-started.md).

:class:`ShortFormatter` writes a record as its message alone (``warning:`` / ``error:`` in front from WARNING up):
the timestamped ``[2026-01-01 12:00:00,000][genEval.search.driver][INFO] -`` prefix of Hydra's default stays in the
run directory's log file. Commands that run through Hydra get it from ``hydra/job_logging=geneval`` and
``hydra/hydra_logging=geneval`` (conf/hydra/job_logging/geneval.yaml, chosen by ``genEval/cli.py``); the others, which
make no run directory, from :func:`log_to_stderr`.
"""

from __future__ import annotations

import logging
import sys


class ShortFormatter(logging.Formatter):
    """``message`` for INFO and below; ``warning: message`` (``error:``, ``critical:``) above; a traceback, if the
    record carries one, after it."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def log_to_stderr(level: int = logging.INFO) -> None:
    """The root logger writes :class:`ShortFormatter` lines to stderr at ``level`` (its other handlers removed)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(ShortFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
