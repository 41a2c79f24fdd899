"""`jobqueue audit list`: newest first as a table or JSON, filters, pages by cursor; bad filters
exit 2 with one line naming the field."""

from __future__ import annotations

import json

import pytest

from jobqueue.cli import main as cli_main
from jobqueue.client import Client


def run(capsys, *args: str) -> tuple[int, str, str]:
    status = cli_main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_list_filters_and_pages(dsn, capsys):
    with Client(dsn, pool_size=1) as client:
        for name in ("a", "b", "c"):
            client.pause_queue(name, force=True)
        client.set_queue_shedding("a", True)
    status, out, _ = run(capsys, "audit", "list", "--dsn", dsn)
    assert status == 0 and out.splitlines()[0].split() == ["SEQ", "AT", "ACTOR", "ACTION", "TARGET", "FROM", "DETAILS"]
    assert [line.split()[3] for line in out.splitlines()[1:]] == ["queue.shedding"] + ["queue.pause"] * 3
    status, out, _ = run(capsys, "audit", "list", "--action", "queue.pause", "--limit", "2", "--json", "--dsn", dsn)
    page = json.loads(out)
    assert [e["target"] for e in page["entries"]] == ["c", "b"] and page["next_cursor"]
    status, out, _ = run(
        capsys, "audit", "list", "--action", "queue.pause", "--cursor", page["next_cursor"], "--json", "--dsn", dsn
    )
    assert [e["target"] for e in json.loads(out)["entries"]] == ["a"]
    status, out, _ = run(
        capsys, "audit", "list", "--target", "a", "--since", "2000-01-01T00:00:00+00:00", "--json", "--dsn", dsn
    )
    assert [e["action"] for e in json.loads(out)["entries"]] == ["queue.shedding", "queue.pause"]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--action", "queue.explode"], "action"),
        (["--since", "yesterday"], "since"),
        (["--since", "2026-01-01T00:00:00"], "since"),
        (["--limit", "0"], "limit"),
        (["--cursor", "-1"], "cursor"),
        (["--cursor", "99999999999999999999"], "cursor"),
        (["--actor", ""], "actor"),
    ],
)
def test_bad_filters_exit_2_naming_the_field(args, field, dsn, capsys):
    status, out, err = run(capsys, "audit", "list", *args, "--dsn", dsn)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {field}:"), err
