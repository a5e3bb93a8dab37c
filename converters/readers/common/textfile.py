"""Line-based input files (CSV and text tables), as a crashed job leaves them.

The profilers end every line with a line end, so a last line without one was cut off mid-write:
it is left out with a warning naming the file and line, and the rows before it convert. A row
the csv module refuses (a field past its 128 KiB limit, which no profiler writes, as a quote
that is never closed makes one) is left out with a warning too (``csv_rows``); a header it
refuses is an error (``csv_header``).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ...errors import Diagnostics, InputError


def whole_lines(lines: Iterable[str], path: Path, diag: Diagnostics, start: int = 1) -> Iterator[str]:
    """``lines`` (an open text file, or what ``csv.reader`` reads), without a last one cut off;
    ``start`` is the number of the first line (2 when the header was read already)."""
    for number, line in enumerate(lines, start=start):
        if not line.endswith("\n"):
            if line.strip():
                diag.warn("truncated_file", f"{path}: line {number} is cut off (no line end); converted "
                          "the lines before it")
            return
        yield line


def csv_header(rows: Any, path: Path) -> list[str]:
    """The field names of a ``csv.DictReader``, or the first row of a ``csv.reader`` ([] if none).

    Raises:
        InputError: the csv module refuses the header.
    """
    try:
        return (rows.fieldnames if isinstance(rows, csv.DictReader) else next(rows, None)) or []
    except csv.Error as e:
        raise InputError(path, "line 1", f"not a CSV header ({e})") from None


def csv_rows(rows: Any, path: Path, diag: Diagnostics) -> Iterator[Any]:
    """The rows of a ``csv.reader`` or ``csv.DictReader``, those the csv module refuses left out
    with a warning naming their line (it reads on from the next line)."""
    while True:
        try:
            yield from rows
            return
        except csv.Error as e:  # a DictReader counts only the lines of the rows it returned
            line = getattr(rows, "reader", rows).line_num
            diag.warn("bad_row", f"{path}: line {line}: not a CSV row ({e}); skipped")
