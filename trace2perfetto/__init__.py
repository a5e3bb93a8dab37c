"""trace2perfetto as a library: NPU and GPU profiler output to Perfetto traces, and its analyses.

::

    import trace2perfetto as t

    result = t.convert("profiler_output/", "job.pftrace", kind="detail")   # -> t.Result
    rows = t.ops_report("profiler_output/", by="type")                    # -> list of OpRow
    table = t.frame(t.ops_record(row) for row in rows)                    # pandas, as the CLI prints
    report = t.report_data("profiler_output/")                           # the `report` command's data

Each ``*_report`` is one command's computation (``trace2perfetto <command>``), returning its rows
(dataclasses, times in ns, None for what the input cannot give); each ``*_record`` turns a row into
the dict the command prints (its table, CSV and JSON columns), which ``frame`` makes a DataFrame of.
``frame`` needs pandas: ``pip install 'trace2perfetto[pandas]'``.

The code lives in the package ``converters`` (``docs/architecture.md``); this package only names
its public functions, so that ``import trace2perfetto`` and ``import converters`` give the same
objects (one class each, whichever name imported it). Each name is imported on first use: importing
this package loads nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from converters.analyses.comm import comm_report
    from converters.analyses.comm_matrix import comm_matrix_report
    from converters.analyses.comm_matrix import record as comm_matrix_record
    from converters.analyses.comm_tables import op_record as comm_record
    from converters.analyses.critical import critical_report
    from converters.analyses.critical import record as critical_record
    from converters.analyses.diff import diff_report
    from converters.analyses.diff import record as diff_record
    from converters.analyses.info import info_report
    from converters.analyses.memory import allocation_record, allocations_report, memory_report
    from converters.analyses.memory import record as memory_record
    from converters.analyses.ops import ops_report
    from converters.analyses.ops import record as ops_record
    from converters.analyses.overlap import overlap_report
    from converters.analyses.overlap import record as overlap_record
    from converters.analyses.pipeline import pipeline_report
    from converters.analyses.pipeline import record as pipeline_record
    from converters.analyses.render import frame
    from converters.analyses.report import report_data, write_report
    from converters.errors import Diagnostics, InputError, Trace2PerfettoError, UsageError
    from converters.executor import Where
    from converters.pipeline import Result, convert
    from converters.profile import Kind, Options, Profile

_HOMES = {  # each name: (the module that defines it, its name there)
    "convert": ("converters.pipeline", "convert"),
    "Result": ("converters.pipeline", "Result"),
    "Profile": ("converters.profile", "Profile"),
    "Options": ("converters.profile", "Options"),
    "Kind": ("converters.profile", "Kind"),
    "Where": ("converters.executor", "Where"),
    "Diagnostics": ("converters.errors", "Diagnostics"),
    "Trace2PerfettoError": ("converters.errors", "Trace2PerfettoError"),
    "UsageError": ("converters.errors", "UsageError"),
    "InputError": ("converters.errors", "InputError"),
    "frame": ("converters.analyses.render", "frame"),
    "info_report": ("converters.analyses.info", "info_report"),
    "overlap_report": ("converters.analyses.overlap", "overlap_report"),
    "overlap_record": ("converters.analyses.overlap", "record"),
    "comm_report": ("converters.analyses.comm", "comm_report"),
    "comm_record": ("converters.analyses.comm_tables", "op_record"),
    "comm_matrix_report": ("converters.analyses.comm_matrix", "comm_matrix_report"),
    "comm_matrix_record": ("converters.analyses.comm_matrix", "record"),
    "ops_report": ("converters.analyses.ops", "ops_report"),
    "ops_record": ("converters.analyses.ops", "record"),
    "memory_report": ("converters.analyses.memory", "memory_report"),
    "memory_record": ("converters.analyses.memory", "record"),
    "allocations_report": ("converters.analyses.memory", "allocations_report"),
    "allocation_record": ("converters.analyses.memory", "allocation_record"),
    "critical_report": ("converters.analyses.critical", "critical_report"),
    "critical_record": ("converters.analyses.critical", "record"),
    "diff_report": ("converters.analyses.diff", "diff_report"),
    "diff_record": ("converters.analyses.diff", "record"),
    "pipeline_report": ("converters.analyses.pipeline", "pipeline_report"),
    "pipeline_record": ("converters.analyses.pipeline", "record"),
    "report_data": ("converters.analyses.report", "report_data"),
    "write_report": ("converters.analyses.report", "write_report"),
}

__all__ = [
    "Diagnostics", "InputError", "Kind", "Options", "Profile", "Result", "Trace2PerfettoError",
    "UsageError", "Where", "allocation_record", "allocations_report", "comm_matrix_record",
    "comm_matrix_report", "comm_record", "comm_report", "convert", "critical_record", "critical_report",
    "diff_record", "diff_report", "frame", "info_report", "memory_record", "memory_report", "ops_record",
    "ops_report", "overlap_record", "overlap_report", "pipeline_record", "pipeline_report",
    "report_data", "write_report",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _HOMES[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
