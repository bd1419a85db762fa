"""The jinja2 environment of genEval's self-contained HTML pages (the report and the oracle audit page).

Templates live in ``genEval/reports/templates/``; autoescaping is on and an undefined variable is an error, so a page
never renders half-empty.
"""

from __future__ import annotations

import jinja2

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("genEval.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
