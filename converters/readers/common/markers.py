"""The user's own annotation as the step (``--step-marker NAME``), for Chrome traces without the
profiler's steps (serving: vLLM's ``execute_model``, a ``record_function`` range): which events
are the marker's ranges (``marks``), how they become steps (``numbered``), and what to say when
a trace holds none (``most_frequent``). ``chrome_trace`` asks these through its ``Dialect``; the
first pass finds the candidates in C (``_core.steps_and_names``: every range whose name holds
the marker's text), ``marks`` decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import STEP_MARKER_UNMATCHED, Diagnostics, UsageError
from ...model import Layer
from .events import Event

UNMATCHED = STEP_MARKER_UNMATCHED  # the warning that a rank holds no range of the marker


def checked(marker: str | None) -> str | None:
    """The marker as given, if it can name a range.

    Raises:
        UsageError: it is empty (or only ``*``).
    """
    if marker is not None and not marker.rstrip("*"):
        raise UsageError(f"--step-marker: {marker!r} names no range (give a range's name, or its start "
                         "and *)")
    return marker


def marks(marker: str | None, event: Event) -> bool:
    """Whether ``event`` is a range of ``marker``: named so, or a Python function of that name
    (Kineto's ``path/file.py(123): name``), or, for ``name*``, named beginning so."""
    name = event.name
    if marker is None or event.ph != "X" or type(name) is not str:
        return False
    if marker.endswith("*"):
        return name.startswith(marker[:-1])
    return name == marker or name.endswith("): " + marker)


def numbered(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (start, duration) ranges that are steps, in time order (step 1 first): a range inside
    or across an earlier one (a nested call of the marked function) is no step of its own."""
    kept: list[tuple[int, int]] = []
    for start_ns, dur_ns in sorted(ranges, key=lambda r: (r[0], -r[1])):
        if not kept or start_ns >= kept[-1][0] + kept[-1][1]:
            kept.append((start_ns, dur_ns))
    return kept


def most_frequent(dialect: Any, files: list[Path], diag: Diagnostics, kind_of: Callable[[Event], Any],
                  shown: int = 5) -> str:
    """The host ranges' names the files hold most, the user's annotations first, in words: what a
    step marker could be, said when it names none (a pass over the files of its own, only then)."""
    found: Counter[tuple[bool, str]] = Counter()
    for path in files:
        for events in dialect.batches(path, diag):
            for event in events:
                if event.ph == "X" and type(event.name) is str and kind_of(event) is Layer.HOST:
                    found[event.cat != "user_annotation", event.name] += 1
    names = sorted(found.items(), key=lambda item: (item[0][0], -item[1], item[0][1]))[:shown]
    return ", ".join(f"{name[:60]!r} ({n})" for (_, name), n in names) or "none"
