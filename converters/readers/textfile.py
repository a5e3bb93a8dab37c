"""Line-based input files (CSV and text tables), as a crashed job leaves them.

The profilers end every line with a line end, so a last line without one was cut off mid-write:
it is left out with a warning naming the file and line, and the rows before it convert.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import Diagnostics


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
