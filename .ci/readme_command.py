"""Print command N of README.md's "The two commands" (1: install and run the main job, 2: install the test extra and
run the tests), exactly as README gives it, so that CI runs what a newcomer copies (issue 30)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

SECTION = "## The two commands"
README = Path(__file__).resolve().parents[1] / "README.md"


def readme_command(n: int, readme: Path = README) -> str:
    text = readme.read_text()
    if SECTION not in text:
        raise SystemExit(f"README.md has no '{SECTION}' section")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    if len(blocks) < n:
        raise SystemExit(f"README.md's '{SECTION}' gives {len(blocks)} command block(s), not {n}")
    return blocks[n - 1].strip()


if __name__ == "__main__":
    print(readme_command(int(sys.argv[1])))
