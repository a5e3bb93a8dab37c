"""docs/reference.md is what the command table and the schemas say today: an option, a command or
a column added without `make docs` fails here."""

from __future__ import annotations

from bench.reference import BEGIN, DOC, END, generated, updated
from converters.cli import COMMANDS


def test_the_command_reference_is_what_make_docs_writes():
    text = DOC.read_text()
    assert updated(text) == text, "docs/reference.md is stale: run `make docs` (python -m bench.reference)"


def test_a_stale_reference_is_found():
    """The check above can fail: a reference missing an option is rewritten."""
    text = DOC.read_text()
    stale = text.replace("--skip-unreadable", "--skip-unreadables")
    assert stale != text and updated(stale) == text


def test_the_reference_holds_every_command_and_its_columns():
    text = generated()
    for name in COMMANDS:
        assert f"usage: trace2perfetto {name} " in text
    assert "`Communication(Not Overlapped)`" in text  # overlap's columns, from its schema
    assert DOC.read_text().count(BEGIN) == DOC.read_text().count(END) == 1
