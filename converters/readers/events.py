"""The Chrome-trace event as the readers of such files decode it: ``chrome_trace``, and the
dialects that subclass its ``Dialect`` (``kineto``, ``paddle``, which make events of their own).
"""

from __future__ import annotations

from typing import Any

import msgspec

_Scalar = int | float | str | None


class Event(msgspec.Struct):
    """The fields of a Chrome-trace event the readers use; ``args`` stays undecoded JSON (an
    event whose args are no object is left out as it becomes a record, in C and in Python: see
    ``chrome_trace.Records``). Those that name and route an event are numbers or text: an event
    with an array or object there is no event (``chrome_trace`` leaves it out as it reads a
    batch); ``ts`` and ``dur`` are read by ``times.us_to_ns``, which says what it cannot read."""

    ph: _Scalar = ""
    name: _Scalar = ""
    pid: _Scalar = None
    tid: _Scalar = None
    ts: Any = None
    dur: Any = 0
    cat: _Scalar = None
    id: _Scalar = None
    args: msgspec.Raw = msgspec.Raw(b"")


def is_profiler_step(name: Any) -> bool:
    """torch_npu's and PyTorch's ``ProfilerStep#N`` (a prefix test first: this runs on every
    event of a file)."""
    return type(name) is str and name.startswith("ProfilerStep#") and name[13:].isdecimal()
