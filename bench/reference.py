"""Writes docs/reference.md's generated part: every command's ``--help`` and the columns of its
JSON output with their definitions (from ``schemas/``), so the reference cannot drift from the
command table (``converters/cli.py``). ``make docs`` runs it; tests/test_reference.py fails when
the file is stale.

    python -m bench.reference           rewrite what lies between the markers
    python -m bench.reference --check   exit 1 if that would change the file
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
from pathlib import Path

from converters.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reference.md"
BEGIN, END = "<!-- reference:begin (python -m bench.reference; do not edit) -->", "<!-- reference:end -->"
WIDTH = "100"  # argparse wraps --help to the terminal: the reference to this width, on any terminal


def help_text(argv: list[str]) -> str:
    """What ``trace2perfetto ARGV`` prints, wrapped at WIDTH columns."""
    out, before = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        with contextlib.redirect_stdout(out):
            main(argv)
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return out.getvalue().rstrip()


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _type(node: dict) -> str:
    options = "/".join(sorted({str(o.get("type", "?")) for o in node.get("oneOf", [])}))
    kind = node.get("type", options or "any")
    kind = "/".join(kind) if isinstance(kind, list) else kind
    return kind + (f" ({', '.join(map(str, node['enum']))})" if "enum" in node else "")


def _tables(node: dict, path: str) -> list[str]:
    """A table per object of the schema (its columns, types and definitions), nested ones after."""
    lines, nested = [], []
    if "properties" in node:
        label = node.get("title") or path or "each record"
        lines += [f"**{label}**" + (f": {node['description']}" if "description" in node and path else ""), "",
                  "| column | type | definition |", "|---|---|---|"]
        for name, child in node["properties"].items():
            definition = _cell(child.get("description", ""))
            lines.append(f"| `{_cell(name)}` | {_cell(_type(child))} | {definition} |")
            nested.append((child, f"{path}.{name}" if path else name))
        lines.append("")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            nested.append((node[key], path + ("[]" if key == "items" else ".*")))
    nested += [(option, path) for option in node.get("oneOf", []) + node.get("anyOf", [])]
    for child, where in nested:
        lines += _tables(child, where)
    return lines


def schema_section(name: str) -> list[str]:
    schema = json.loads((ROOT / "schemas" / name).read_text())
    return [f"#### `schemas/{name}`: {schema.get('title', '')}", "", schema.get("description", ""), "",
            *_tables(schema, "")]


def generated() -> str:
    parts = ["## `trace2perfetto --help`", "", "```text", help_text(["--help"]), "```", ""]
    for command in COMMANDS.values():
        own = f"{command.name}.schema.json"  # overlap's help names no schema; its file is named so
        cited = re.findall(r"schemas/([\w.]+\.json)", command.examples + command.format_help)
        schemas = dict.fromkeys([own, *cited] if (ROOT / "schemas" / own).is_file() else cited)
        summary = command.summary[:1].upper() + command.summary[1:] + "."
        parts += [f"## `trace2perfetto {command.name}`", "", summary,
                  "", "```text", help_text([command.name, "--help"]), "```", ""]
        if schemas:
            same = "; the CSV and the table have the same columns" if "csv" in command.formats else ""
            parts += [f"### What it prints (`--format json`{same})", ""]
            for schema in schemas:
                parts += schema_section(schema)
    return "\n".join(parts).rstrip() + "\n"


def updated(text: str) -> str:
    """TEXT with what lies between the markers replaced by the generated reference."""
    before, begin, rest = text.partition(BEGIN)
    _, end, after = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{DOC}: the markers {BEGIN!r} and {END!r} are missing")
    return f"{before}{BEGIN}\n{generated()}{END}{after}"


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/reference.md is stale")
    args = parser.parse_args(argv)
    old = DOC.read_text()
    new = updated(old)
    if args.check:
        if new != old:
            print(f"{DOC.relative_to(ROOT)} is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main_())
