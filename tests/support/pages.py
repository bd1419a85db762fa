"""The pages people read, made from toy runs, and the headless Chromium that reads them
(tests/service/server/test_pages_browser.py, tests/reports/test_report.py): they live in
:mod:`benchmarks.harness.pages`, which benchmarks/page_widths.py shares."""

from benchmarks.harness.pages import (
    BASE,
    CHROMIUM_FLAGS,
    NAMES,
    TABLE_LAYOUT_JS,
    browser,
    chromium,
    image_data,
    route_to,
    toy_comparison,
    toy_service,
)

__all__ = [
    "BASE",
    "CHROMIUM_FLAGS",
    "NAMES",
    "TABLE_LAYOUT_JS",
    "browser",
    "chromium",
    "image_data",
    "route_to",
    "toy_comparison",
    "toy_service",
]
