"""The ```python blocks of README.md and docs/*.md, with where they are and how to run them.

A block runs as it is shown. What a fragment takes for granted is said in an HTML comment
on the line right above its fence (invisible once rendered), ``key=value`` pairs
separated by ``;``:

- ``given=backend,sem,permit``: names defined before the block runs, on ``memory://``
  (``backend`` a backend, ``sem`` its semaphore ``db-pool`` of capacity 10, ``permit`` a
  permit of it; the asyncio face's when the block awaits);
- ``continues``: the python block above it in the same file runs first, in the same
  namespace (a block that goes on from the one before);
- ``shown-by=tests/FILE.py``: the block is that test file's example (between its
  ``# --- user guide example: start`` and ``end`` lines) character for character,
  and pytest runs it there;
- ``needs=MODULE``: the block imports a framework that is not a dependency of the
  project; it runs where MODULE is installed and is a listed skip elsewhere;
- ``skip=REASON``: the block cannot run here at all (listed with its reason).

Hosts, ports and files of the examples (``zk1:2181``, ``e1:2379``, ``r1:6379``...) are
replaced by the test servers (tests/test_docs_code.py, ``REWRITES``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```python\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_KEYS = {"given", "continues", "shown-by", "needs", "skip"}


@dataclass(frozen=True)
class DocBlock:
    path: Path
    line: int  #: of the block's first code line (1-based)
    source: str
    directives: dict[str, str] = field(default_factory=dict)
    previous: DocBlock | None = None  #: the python block above it in the same file

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def given(self) -> list[str]:
        names = self.directives.get("given", "")
        return [name.strip() for name in names.split(",") if name.strip()]


def parse_directive(text: str, where: str) -> dict[str, str]:
    """``key=value; key`` -> {key: value}; an unknown key is an error (a typo would
    otherwise be ignored)."""
    found: dict[str, str] = {}
    for part in text.split(";"):
        key, _, value = part.strip().partition("=")
        if key not in _KEYS:
            raise ValueError(f"{where}: unknown doc-test directive {key!r} (known: {_KEYS})")
        found[key] = value.strip()
    return found


def blocks_of(path: Path) -> list[DocBlock]:
    lines = path.read_text().splitlines()
    found: list[DocBlock] = []
    i = 0
    while i < len(lines):
        if not _FENCE.match(lines[i]):
            i += 1
            continue
        start = i + 1
        end = start
        while not lines[end].startswith("```"):
            end += 1
        where = f"{path.relative_to(ROOT)}:{start + 1}"
        above = _DIRECTIVE.match(lines[i - 1]) if i else None
        directives = parse_directive(above.group(1), where) if above else {}
        source = "\n".join(lines[start:end]) + "\n"
        found.append(DocBlock(path, start + 1, source, directives, found[-1] if found else None))
        i = end + 1
    return found


def all_blocks() -> list[DocBlock]:
    return [block for path in DOCUMENTS for block in blocks_of(path)]
