"""trace2perfetto: NPU and GPU profiler output to Perfetto traces and Chrome JSON.

The code's package. The library's public name is ``trace2perfetto`` (``import trace2perfetto``,
docs/library.md), which re-exports from here; ``converters`` keeps working for the tests and older
callers. Library use::

    from converters import convert, discover, read_profile, Options
    result = convert("profiler_output/", "job.pftrace", ranks=[0, 1], kind="detail")

    report = comm_report("profiler_output/")           # communication per op, slow ranks, clocks
    ranks = discover("profiler_output/")               # RankInfo per rank, ordered by rank
    for step in read_profile(ranks, Options(), Diagnostics()):
        ...                                            # StepRecords: one rank, one step

The names below are imported on first use (PEP 562), so that importing ``converters.cli`` costs
only what the command run needs: ``trace2perfetto info`` loads no report, writer or comm analysis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Eager: the submodule ``converters.discover`` would otherwise shadow the function of its name, and
# every command opens its profile through it anyway.
from .discover import discover

if TYPE_CHECKING:
    from .analyses.comm import CommReport, comm_report
    from .analyses.overlap import StepOverlap, overlap_report
    from .errors import Diagnostics, InputError, Trace2PerfettoError, UsageError
    from .model import Layer, RankInfo, Slice, Step, StepRecords
    from .pipeline import Format, Result, convert
    from .profile import Kind, Options, Profile, read_profile, step_overlap

_HOMES = {  # each exported name: the module that defines it
    **dict.fromkeys(("CommReport", "comm_report"), ".analyses.comm"),
    **dict.fromkeys(("StepOverlap", "overlap_report"), ".analyses.overlap"),
    **dict.fromkeys(("Diagnostics", "InputError", "Trace2PerfettoError", "UsageError"), ".errors"),
    **dict.fromkeys(("Layer", "RankInfo", "Slice", "Step", "StepRecords"), ".model"),
    **dict.fromkeys(("Format", "Result", "convert"), ".pipeline"),
    **dict.fromkeys(("Kind", "Options", "Profile", "read_profile", "step_overlap"), ".profile"),
}

__all__ = [
    "Diagnostics", "Format", "InputError", "Kind", "Layer", "Options", "RankInfo", "Result",
    "Slice", "Step", "StepRecords", "Trace2PerfettoError", "UsageError", "convert", "discover",
    "read_profile", "step_overlap", "overlap_report", "StepOverlap", "comm_report", "CommReport", "Profile",
]


def __getattr__(name: str) -> Any:
    """An exported name, imported from its module the first time it is asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
