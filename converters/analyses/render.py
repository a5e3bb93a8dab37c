"""How every analysis prints its rows: an aligned table, CSV or a JSON array on stdout, streamed
row by row where the format allows (CSV and JSON: tables of thousands of ranks in flat memory),
and the small formatting rules they share (``-`` for what the input cannot give, never 0)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TextIO

import orjson

from ..select import format_ids

FORMATS = ("table", "csv", "json")


class Rows:
    """One table of records (dicts with the same keys, in column order), written as they come:
    CSV rows and JSON array items at once, the aligned table at ``close``, with ``note`` below it
    and its text cells cut to ``cell_width`` characters (None: whole; ``cut``), figures never."""

    def __init__(self, fmt: str, header: list[str], note: str = "", out: TextIO | None = None,
                 cell_width: int | None = None) -> None:
        self.fmt, self.header, self.note, self.cell_width = fmt, header, note, cell_width
        self.out = out or sys.stdout
        self.count = 0
        self.table: list[list[str]] = [header]
        self.writer = None
        if fmt == "csv":
            import csv  # for CSV only: `info` and the tables start without it (issue 44)

            self.writer = csv.DictWriter(self.out, header, lineterminator="\n")

    def add(self, records: Iterable[dict]) -> None:
        for record in records:
            if self.fmt == "json":
                self.out.write(("[\n  " if not self.count else ",\n  ") + orjson.dumps(record).decode())
            elif self.writer is not None:
                if not self.count:
                    self.writer.writeheader()
                self.writer.writerow(record)
            else:
                self.table.append([record[h] for h in self.header])  # cut and spelled at close
            self.count += 1

    def close(self) -> None:
        if self.fmt == "json":
            self.out.write("[]\n" if not self.count else "\n]\n")
        elif self.writer is not None:
            if not self.count:
                self.writer.writeheader()
        else:
            rows = self.table[1:]
            columns = [_column([row[i] for row in rows], self.cell_width) for i in range(len(self.header))]
            self.table[1:] = [list(row) for row in zip(*columns, strict=True)] if rows else []
            print_table(self.table, self.out)
            if self.note:
                print(self.note, file=self.out)


_MORE = "..."


def _column(values: list[object], width: int | None) -> list[str]:
    """A column's cells: its texts cut to ``width`` together (``cut``), its figures whole."""
    texts = [value for value in values if type(value) is str]
    shown = iter(cut(texts, width) if width is not None else texts)
    return [next(shown) if type(value) is str else cell(value) for value in values]


def cut(texts: list[str], width: int) -> list[str]:
    """A column's texts, each longer than ``width`` cut to it by its middle: its start and its end
    (where kernel names and what-if lines say what they are, and how much), so that no two texts
    become one. Texts that still would (they differ only in their middle) show, after their start,
    the part from where they depart from one another (``_apart``); any still alike are numbered."""
    out = [_ends(text, width) for text in texts]
    alike: dict[str, set[str]] = {}
    for text, shown in zip(texts, out, strict=True):
        if shown is not text:
            alike.setdefault(shown, set()).add(text)
    shown_as: dict[str, str] = {}
    for group in alike.values():
        if len(group) > 1:
            _apart(sorted(group), width, -1, shown_as)
    for _ in range(4):  # two groups' parts alike (what set them apart is in neither): numbered
        seen: dict[str, list[str]] = {}
        for text, shown in shown_as.items():
            seen.setdefault(shown, []).append(text)
        if all(len(same) == 1 for same in seen.values()):
            break
        for same in seen.values():
            _numbered(sorted(same), width, shown_as)
    return [shown_as.get(text, shown) for text, shown in zip(texts, out, strict=True)]


def _numbered(same: list[str], width: int, shown_as: dict[str, str]) -> None:
    """Texts shown alike: the second on with its number in place of its last characters."""
    for n, text in enumerate(same[1:], 2):
        mark = f" #{n}"
        shown_as[text] = shown_as[same[0]][:width - len(mark)] + mark


def _apart(group: list[str], width: int, before: int, shown_as: dict[str, str]) -> None:
    """Texts alike when cut: each as its start and the part from where the group departs (their
    common prefix's end); those alike again, the same from where they depart, further on; texts
    that depart nowhere further are numbered, in name order."""
    at = len(os.path.commonprefix(group))
    if at <= before:
        _numbered(group, width, shown_as)
        return
    by_shown: dict[str, list[str]] = {}
    for text in group:
        shown_as[text] = shown = _around(text, at, width)
        by_shown.setdefault(shown, []).append(text)
    for same in by_shown.values():
        if len(same) > 1:
            _apart(same, width, at, shown_as)


def _ends(text: str, width: int) -> str:
    """``text``, or its start and its end with ``...`` between, ``width`` characters in all."""
    if len(text) <= width:
        return text
    keep = width - len(_MORE)
    return text[:keep - keep // 2] + _MORE + text[len(text) - keep // 2:]


def _around(text: str, at: int, width: int) -> str:
    """``text`` as its start, then the part from a little before ``at`` on, ``width`` characters in all."""
    keep = width - 2 * len(_MORE)
    head = keep // 3
    window = keep - head
    start = max(head, at - window // 3)  # some of what comes before it, for context
    if start + window + len(_MORE) >= len(text):  # the rest fits: to the end
        return text[:head] + _MORE + text[len(text) - (window + len(_MORE)):]
    return text[:head] + _MORE + text[start:start + window] + _MORE


def frame(records: Iterable[dict]):
    """Records (``overlap.record``, ``ops.record``, ...) as a pandas DataFrame, one column per key,
    for notebooks. pandas is no dependency of trace2perfetto: ``pip install 'trace2perfetto[pandas]'``.

    Example::

        from converters.analyses import overlap, render
        table = render.frame(map(overlap.record, overlap.overlap_report("profiler_output/")))

    Raises:
        ImportError: pandas is not installed (the message says how to install it).
    """
    try:
        import pandas
    except ImportError as e:
        raise ImportError("a DataFrame needs pandas: pip install 'trace2perfetto[pandas]' "
                          "(or pip install pandas)", name="pandas") from e
    return pandas.DataFrame.from_records(list(records))


def print_table(rows: list[list[str]], out: TextIO | None = None) -> None:
    """Rows of cells, right-aligned in columns; the first row is the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)), file=out or sys.stdout)


def cell(value: object) -> str:
    """A table cell: ``-`` where the input cannot give the figure."""
    return "-" if value is None else str(value)


def ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 6)


def size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def clock_records(clocks) -> list[dict]:
    """Each host's clock offset as the collectives show it (``communication.HostClock``), as JSON records."""
    return [{"Host": c.host, "Ranks": list(c.ranks), "Offset(us)": c.offset_ns / 1000,
             "Spread(us)": c.spread_ns / 1000, "Collectives": c.instances} for c in clocks]


def print_clocks(clocks, aligned: bool) -> None:
    """The hosts' clock offsets under a table, where there are two hosts or more."""
    if len(clocks) < 2:
        return
    state = "applied" if aligned else "not applied; --align collectives applies it"
    print(f"clock offsets from the collectives' ends ({state}):")
    for c in clocks:
        who = c.host if c.host.startswith("rank ") else f"{c.host} (rank {format_ids(c.ranks)})"
        print(f"  {who}: {c.offset_ns / 1000:+.3f} µs" + (
            f", spread {c.spread_ns / 1000:.3f} µs over {c.instances} collectives" if c.instances else
            " (the reference)"))
