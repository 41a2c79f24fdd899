"""The fenced code blocks of README.md and docs/*.md, for the tests that keep them true
(tests/unit/test_docs.py: they parse; tests/acceptance/test_doc_snippets.py: they run).

A ```python block is one of three kinds:

- an **app**: it makes a ``JobQueue(...)`` and its first line names its file (``# myapp.py``); it is
  imported, and a worker serves it while the scripts after it on the same page run;
- a **script**, any other block: run as written with ``python`` (``JOBQUEUE_DSN`` set), so it reads
  its DSN from the environment and needs no top-level ``await``;
- **not run**: the line before its fence is ``<!-- not-run: why -->``. The tests list each one with
  its reason (pytest reports them as skipped), so none is left out silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->\s*$")
FILE_NAME = re.compile(r"^# (\w+)\.py\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # README.md, docs/enqueue.md, …
    line: int  # of the opening fence
    language: str
    body: str
    not_run: str | None  # the reason, when marked not-run

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def file_name(self) -> str | None:
        """``myapp`` for a block that starts with ``# myapp.py``."""
        found = FILE_NAME.match(self.body.split("\n", 1)[0])
        return found.group(1) if found else None

    @property
    def kind(self) -> str:
        if self.not_run is not None:
            return "not-run"
        return "app" if "JobQueue(" in self.body else "script"


def blocks(language: str | None = None) -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            if language is not None and match.group(1) != language:
                continue
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marked = NOT_RUN.search(before)
            found.append(
                Block(
                    page=str(page.relative_to(ROOT)),
                    line=text.count("\n", 0, match.start()) + 1,
                    language=match.group(1),
                    body=match.group(2),
                    not_run=marked.group(1) if marked else None,
                )
            )
    return found


def apps_before(script: Block) -> dict[str, Block]:
    """The app blocks above ``script`` on its page, by file name (a later one of the same name
    replaces an earlier: the page is showing another version of the same file)."""
    apps = {}
    for block in blocks("python"):
        if block.page == script.page and block.line < script.line and block.kind == "app" and block.file_name:
            apps[block.file_name] = block
    return apps
