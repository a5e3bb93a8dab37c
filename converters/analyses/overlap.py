"""``trace2perfetto overlap``: the compute/communication overlap of every step of every rank, with
the columns and definitions of torch_npu's ``step_trace_time.csv`` (docs/analysis.md). The
conversion draws the same figures as the overlap lanes (``profile.overlap_slices``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import intervals
from ..errors import Diagnostics
from ..executor import LOCAL, Where
from ..model import RECV, Layer, RankInfo, Slice, StepRecords, comm_kind
from ..profile import Options, Profile, folded, owned, read_profile, step_overlap, summed

COLUMNS = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication",
           "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)",
           "Preparing")  # step_trace_time.csv's, in its order


@dataclass(frozen=True)
class StepOverlap:
    """One row of the overlap report: one step of one rank, in ns, with the columns of torch_npu's
    ``step_trace_time.csv`` and its definitions (docs/design.md §5). None: unknown for this input (no
    device tasks recorded, or no host step start for Preparing), never a made-up zero."""

    rank: int
    graph: int | None
    step: int | None
    computing_ns: int | None
    not_overlapped_ns: int | None
    overlapped_ns: int | None
    communication_ns: int
    free_ns: int | None
    stage_ns: int | None  # the step's device span minus Bubble
    bubble_ns: int  # time in receive ops (pipeline bubbles): their union (an op recorded twice once)
    not_overlapped_excluding_receive_ns: int | None  # Communication (not overlapped) - Bubble
    preparing_ns: int | None  # from the host's step start to the first compute or communication
    # MindSpore's own cluster step trace figures (``overlap_report(mindinsight=True)``, in
    # ``mindinsight.COLUMNS``' order; each None where the device side is unknown); None: not asked for
    mindinsight: tuple[int | None, ...] | None = None


def overlap_report(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    step_marker: str | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
    each: Callable[[list[StepOverlap]], None] | None = None,
    mindinsight: bool = False,
) -> list[StepOverlap]:
    """The compute/communication overlap of every kept step of every kept rank; what needed
    recovery in the input is added to ``diag``. ``mindinsight``: each row with MindSpore's own
    cluster step trace figures too (``analyses.mindinsight``). ``where``: the ranks' work runs on
    this machine, or on a Dask cluster (``executor.Where``). ``each``: the rows are handed to it
    rank by rank, in rank order, as soon as they are known, and not kept (tables of thousands of
    ranks in flat memory); the list returned is then empty.

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under ``path``.
        InputError: an input file broken beyond recovery.
    """
    profile = Profile.open(path, Options(ranks=ranks, graphs=graphs, steps=steps, step_marker=step_marker),
                           where=where, diag=diag)
    kept: list[StepOverlap] = []
    hand = each or kept.extend
    profile.map(rank_rows, lambda *_: (mindinsight,), each=lambda _, rows: hand(rows), ordered=True)
    profile.check_steps()
    return kept


def rank_rows(info: RankInfo, options: Options, diag: Diagnostics, mindinsight: bool = False
              ) -> list[StepOverlap]:
    """One rank's rows of the overlap report. Runs in a worker process."""
    if not mindinsight:
        rows = ((batch.part, overlap_row(batch)) for batch in read_profile([info], options, diag))
        return list(folded(rows, joined_rows))
    from . import mindinsight as ms

    rows = []
    for batch in read_profile([info], options, diag):
        row = overlap_row(batch)
        found = ms.cluster_step(batch, step_span(batch)[1], step_overlap(batch).computing, is_receive)
        rows.append(dataclasses.replace(row, mindinsight=(None,) * 5 if found is None else tuple(found)))
    return rows


def joined_rows(a: StepOverlap, b: StepOverlap) -> StepOverlap:
    """The rows of two parts of a pseudo step as one (``profile.folded``): their figures add up."""
    return summed(a, b, _FIGURES)


_FIGURES = ("computing_ns", "not_overlapped_ns", "overlapped_ns", "communication_ns", "free_ns", "stage_ns",
            "bubble_ns", "not_overlapped_excluding_receive_ns", "preparing_ns")


def record(r: StepOverlap) -> dict:
    """One row of the overlap table, in µs, under torch_npu's column names (and MindSpore's, for
    its own figures)."""
    out = {"Rank": r.rank, "Graph": r.graph, "Step": r.step,
           **dict(zip(COLUMNS, (_us(v) for v in (
               r.computing_ns, r.not_overlapped_ns, r.overlapped_ns, r.communication_ns, r.free_ns,
               r.stage_ns, r.bubble_ns, r.not_overlapped_excluding_receive_ns, r.preparing_ns)),
               strict=True))}
    if r.mindinsight is not None:
        from .mindinsight import COLUMNS as THEIRS

        out.update(zip(THEIRS, map(_us, r.mindinsight), strict=True))
    return out


def _us(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1000, 3)


def overlap_row(batch: StepRecords) -> StepOverlap:
    """One step's row of the overlap report, as torch_npu's TraceStepTimeParser defines it; the
    profiler's own figures where they stand for the step's records."""
    o = step_overlap(batch)
    low, high = owned(batch.step, o.computing) or (None, None)
    receiving = intervals.union((s.start_ns, s.end_ns) for s in batch.slices if is_receive(s))
    bubble = intervals.total_ns(intervals.clip(receiving, low, high))
    if batch.figures is not None:
        f = batch.figures
        communication = o.communication_ns if f.communication_ns is None else f.communication_ns
        return StepOverlap(batch.rank, batch.graph, batch.step_id, f.computing_ns, f.not_overlapped_ns,
                           f.overlapped_ns, communication, f.free_ns, f.stage_ns,
                           bubble if f.bubble_ns is None else f.bubble_ns,
                           f.not_overlapped_excluding_receive_ns, f.preparing_ns)
    if not batch.has_device:
        return StepOverlap(batch.rank, batch.graph, batch.step_id, None, None, None, o.communication_ns,
                           None, None, bubble, None, None)
    lanes = [lane for lane in (o.computing, o.communication, o.free) if lane]
    span = max(lane[-1][1] for lane in lanes) - min(lane[0][0] for lane in lanes) if lanes else 0
    first = min((lane[0][0] for lane in (o.computing, o.communication) if lane), default=None)
    step = batch.step
    preparing = first - step.start_ns if step and step.host_start and first is not None else None
    return StepOverlap(
        batch.rank, batch.graph, batch.step_id, o.computing_ns, o.not_overlapped_ns, o.overlapped_ns,
        o.communication_ns, o.free_ns, span - bubble, bubble, o.not_overlapped_ns - bubble, preparing,
    )


def step_span(batch: StepRecords) -> tuple[int, int, bool]:
    """(start, duration, whether it starts where the host began the step) of one step: its bounds;
    else, where the profiler's figures stand for it, its time from them (``StepFigures.step_ns``)
    from its first op (its start is not recorded); else its first to its last device work (and
    where Free is measured)."""
    if batch.step is not None:
        return batch.step.start_ns, batch.step.end_ns - batch.step.start_ns, batch.step.host_start
    o = step_overlap(batch)
    busy = o.computing + o.communication + ([batch.device_span] if batch.device_span else [])
    start = min((a for a, _ in busy), default=batch.start_ns)
    figures = batch.figures
    if figures is not None and figures.step_ns is not None:
        return start, figures.step_ns, figures.preparing_ns is not None
    return start, (max(b for _, b in busy) - start) if busy else 0, False


def is_receive(s: Slice) -> bool:
    """A receive op, whose time is a pipeline bubble: what its reader says it does (``RECV``), as
    torch_npu counts its receives only (not the batched send-and-receive, ``SENDRECV``)."""
    return s.layer is Layer.COMM_OP and comm_kind(s) == RECV
