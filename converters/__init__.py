"""trace2perfetto: NPU and GPU profiler output to Perfetto traces and Chrome JSON.

Library use::

    from converters import convert, discover, read_profile, Options
    result = convert("profiler_output/", "job.pftrace", ranks=[0, 1], kind="detail")

    report = comm_report("profiler_output/")           # communication per op, slow ranks, clocks
    ranks = discover("profiler_output/")               # RankInfo per rank, ordered by rank
    for step in read_profile(ranks, Options(), Diagnostics()):
        ...                                            # StepRecords: one rank, one step
"""

from .analyses.comm import CommReport, comm_report
from .analyses.overlap import StepOverlap, overlap_report, step_overlap
from .discover import discover
from .errors import Diagnostics, InputError, Trace2PerfettoError, UsageError
from .model import Layer, RankInfo, Slice, Step, StepRecords
from .pipeline import Format, Result, convert
from .profile import Kind, Options, Profile, read_profile

__all__ = [
    "Diagnostics", "Format", "InputError", "Kind", "Layer", "Options", "RankInfo", "Result",
    "Slice", "Step", "StepRecords", "Trace2PerfettoError", "UsageError", "convert", "discover",
    "read_profile", "step_overlap", "overlap_report", "StepOverlap", "comm_report", "CommReport", "Profile",
]
