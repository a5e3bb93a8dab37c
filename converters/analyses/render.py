"""How every analysis prints its rows: an aligned table, CSV or a JSON array on stdout, streamed
row by row where the format allows (CSV and JSON: tables of thousands of ranks in flat memory),
and the small formatting rules they share (``-`` for what the input cannot give, never 0)."""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable
from typing import TextIO

import orjson

from ..errors import UsageError
from ..select import format_ids

FORMATS = ("table", "csv", "json")


class Rows:
    """One table of records (dicts with the same keys, in column order), written as they come:
    CSV rows and JSON array items at once, the aligned table at ``close``, with ``note`` below it
    and its cells cut to ``cell_width`` characters (None: whole)."""

    def __init__(self, fmt: str, header: list[str], note: str = "", out: TextIO | None = None,
                 cell_width: int | None = None) -> None:
        self.fmt, self.header, self.note, self.cell_width = fmt, header, note, cell_width
        self.out = out or sys.stdout
        self.count = 0
        self.table: list[list[str]] = [header]
        self.writer = csv.DictWriter(self.out, header, lineterminator="\n") if fmt == "csv" else None

    def add(self, records: Iterable[dict]) -> None:
        for record in records:
            if self.fmt == "json":
                self.out.write(("[\n  " if not self.count else ",\n  ") + orjson.dumps(record).decode())
            elif self.writer is not None:
                if not self.count:
                    self.writer.writeheader()
                self.writer.writerow(record)
            else:
                self.table.append([self._cut(cell(record[h])) for h in self.header])
            self.count += 1

    def _cut(self, text: str) -> str:
        width = self.cell_width
        return text if width is None or len(text) <= width else text[:width - 3] + "..."

    def close(self) -> None:
        if self.fmt == "json":
            self.out.write("[]\n" if not self.count else "\n]\n")
        elif self.writer is not None:
            if not self.count:
                self.writer.writeheader()
        else:
            print_table(self.table, self.out)
            if self.note:
                print(self.note, file=self.out)


def frame(records: Iterable[dict]):
    """Records (``overlap.record``, ``ops.record``, ...) as a pandas DataFrame, one column per key,
    for notebooks. pandas is no dependency of trace2perfetto: this needs it installed.

    Example::

        from converters.analyses import overlap, render
        table = render.frame(map(overlap.record, overlap.overlap_report("profiler_output/")))

    Raises:
        UsageError: pandas is not installed.
    """
    try:
        import pandas
    except ImportError as e:
        raise UsageError("a DataFrame needs pandas (pip install pandas)") from e
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
    """Each host's clock offset as the collectives show it (``comm.HostClock``), as JSON records."""
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
