"""The README and docs/ stay true: links and anchors resolve, Python examples compile as the scripts
and apps they are (tests/acceptance/test_doc_snippets.py runs them), and every `jobqueue …` command
line shown in a shell example is one the real parser accepts."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from jobqueue.cli.main import build_parser
from jobqueue.cli.worker import add_worker_options
from tests.support import docs
from tests.support.docs import FENCE, PAGES, ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors, with -1, -2 … for repeated headings; code blocks excluded."""
    text = FENCE.sub("", page.read_text())
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return anchors


def _blocks(language: str) -> list[tuple[str, str]]:
    return [(block.page, block.body) for block in docs.blocks(language)]


def test_docs_exist_and_the_readme_links_every_page():
    readme = (ROOT / "README.md").read_text()
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert len(pages) >= 8
    missing = [page.name for page in pages if f"(docs/{page.name})" not in readme]
    assert not missing, f"README does not link {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_and_anchors_resolve(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def test_python_examples_compile_as_what_they_are():
    """A script or an app compiles as a plain module: a top-level ``async with`` (the README's, once)
    is a SyntaxError for the user who runs it. Only a block marked not-run may be a fragment."""
    failures = []
    for block in docs.blocks("python"):
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if block.kind == "not-run" else 0
        try:
            compile(block.body, block.where, "exec", flags=flags)
        except SyntaxError as exc:
            failures.append(f"{block.where}: {exc}\n{block.body}")
    assert not failures, "\n\n".join(failures)
    assert len(docs.blocks("python")) >= 5


def test_runnable_python_examples_read_the_dsn_and_name_their_app_file():
    wrong = []
    for block in docs.blocks("python"):
        if block.kind == "not-run":
            if not block.not_run:
                wrong.append(f"{block.where}: not-run without a reason")
            continue
        if "postgresql://" in block.body:
            wrong.append(f"{block.where}: a DSN written in; read os.environ['JOBQUEUE_DSN'] as the user would")
        if block.kind == "app" and not block.file_name:
            wrong.append(f"{block.where}: an app's first line names its file (# myapp.py), as a worker's --app does")
    assert not wrong, "\n".join(wrong)


def _command_lines() -> list[tuple[str, list[str]]]:
    """`jobqueue …` / `jobqueue-worker …` invocations in sh examples, continuation lines joined;
    placeholders written as <…> are replaced by a plain word, `$VAR` stays a word."""
    found = []
    for name, body in _blocks("sh"):
        for line in body.replace("\\\n", " ").splitlines():
            line = re.sub(r"^.*?\$\((?=jobqueue)", "", line)  # KEY=$(jobqueue apikey create …)
            line = line.split(" #")[0].split(")")[0] if "$(" in line or line.count(")") else line.split(" #")[0]
            line = re.sub(r"<[^>]+>", "x", line).strip().rstrip("&").strip()
            if re.match(r"^(\.venv/bin/)?jobqueue(-worker)?( |$)", line) and not re.search(r"\[|…|\|", line):
                found.append((name, shlex.split(line)))
    return found


def test_shell_examples_are_commands_the_parser_accepts():
    import argparse

    lines = _command_lines()
    assert len(lines) >= 10
    refused = []
    for name, argv in lines:
        program, args = Path(argv[0]).name, argv[1:]
        if program == "jobqueue-worker":
            parser = argparse.ArgumentParser(prog="jobqueue-worker", exit_on_error=False)
            add_worker_options(parser)
        else:
            parser = build_parser()
        try:
            parser.parse_args(args)
        except SystemExit:
            refused.append(f"{name}: {' '.join(argv)}")
    assert not refused, "refused by the parser:\n" + "\n".join(refused)
