"""The pages people read, made from toy runs (tests/service/server/test_pages_browser.py): they live in
:mod:`benchmarks.harness.pages`, which benchmarks/page_widths.py shares."""

from benchmarks.harness.pages import (
    BASE,
    NAMES,
    TABLE_LAYOUT_JS,
    browser,
    image_data,
    route_to,
    toy_comparison,
    toy_service,
)

__all__ = ["BASE", "NAMES", "TABLE_LAYOUT_JS", "browser", "image_data", "route_to", "toy_comparison", "toy_service"]
