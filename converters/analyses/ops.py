"""Operator statistics: count and time of the device ops of each rank, by op type (torch_npu's
``op_statistic.csv``), by op name, by type and input shapes, or by type and step.

Two pure parts, so the work splits over ranks and steps and the results add up in any order:
``accumulate`` sums one rank's steps into a small picklable ``RankOps`` (count, total, min and max
per key); ``combine`` merges those of each rank and returns the rows. msprof's own rules
(``op_statistic``, CANN's ``MergeOPCounter``): one row per op type and core type, Ratio the share of
the rank's total, rows by total time, largest first; torch_npu leaves communication out.
``across`` turns those rows into one row per key over the ranks (the spread of the ranks' totals,
the slowest rank), whatever the order of the ranks.

What counts is a device task that computes (``intervals.is_compute``: no notify, event, copy or HCCL
task), as each reader gives it: its op type from ``Type`` (torch_npu's kernel_details.csv), ``Op
Type`` (the databases) or ``type`` (MindSpore 1.x framework_raw); else MindSpore's scope name
without its ``-opN`` suffix (msprof); else its name (GPU kernels). Its core type is its task type
(AI_CORE, AI_VECTOR_CORE, MIX_AIV, AI_CPU, ...), GPU for a GPU kernel. Where a rank ran no device
work, the host ranges a reader marks as operators (``HOST_OPERATOR``: Paddle's Operator events, its
operator summary; MindSpore's CPU ops; the CPU ops of a PyTorch CPU run) stand in, as CPU ops, with
their self time too: an operator's time less that of the operators directly inside it on its thread, as
PyTorch's ``key_averages()`` gives it. A rank with neither has no rows (never zeros). A rank none of
whose NPU tasks names its op type (torch_npu at profiler level 0) has its rows by task name, and
``ops_report`` says so.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import NOTHING_DRAWN, Diagnostics, UsageError
from ..executor import LOCAL, Where
from ..intervals import is_compute
from ..model import (
    GPU_KERNEL,
    HOST_OPERATOR,
    NAMED_BY_KERNEL,
    Layer,
    RankInfo,
    Slice,
    StepRecords,
    decoded_args,
)
from ..profile import Kind, Options, Profile, read_profile
from ..readers import for_ops, host_ops_in_detail

BY = ("type", "name", "shape", "step")
HOST_CORE = "CPU"
GPU_CORE = "GPU"
_MINDSPORE_OP = re.compile(r"(?:^|/)([^/]+)-op\d+$")  # Default/network/.../Cast-op239: a Cast

Key = tuple  # (name, core, shapes) or (name, core, (step run, step id, graph id))
Figures = list[int]  # [count, total_ns, min_ns, max_ns, self_ns]


@dataclass(slots=True)
class RankOps:
    """What some steps of one rank add up to: per key, its count, total, min and max (ns). Keys of
    device ops and of host operators apart: a rank's rows come from its device ops where it has
    any. Small and picklable: a worker's result."""

    rank: int
    by: str
    device: dict[Key, Figures] = dataclasses.field(default_factory=dict)
    host: dict[Key, Figures] = dataclasses.field(default_factory=dict)
    typed: bool = False  # whether any of its NPU tasks names its op type (torch_npu at level 0: none)

    @property
    def empty(self) -> bool:
        return not self.device and not self.host

    def add(self, batch: StepRecords) -> None:
        """Add one step's ops: what ``accumulate`` does per step, for a read that does more with
        each step (the report's summary read)."""
        step = _step_of(batch) if self.by == "step" else None
        host: list[Slice] = []
        for s in batch.slices:
            if s.layer is Layer.STREAM and is_compute(s.task_type):
                core = GPU_CORE if s.task_type == GPU_KERNEL else s.task_type
                named = _add_op(self.device, s, core, self.by, step)
                self.typed = self.typed or named or s.task_type in NAMED_BY_KERNEL
            elif s.layer is Layer.HOST and s.task_type == HOST_OPERATOR:
                host.append(s)
        for s, self_ns in self_times(host):
            _add_op(self.host, s, HOST_CORE, self.by, step, self_ns)


def self_times(operators: list[Slice]) -> Iterator[tuple[Slice, int]]:
    """Each host operator with its self time: its time less that of the operators directly inside
    it on its thread (lane), as ``key_averages()`` counts self CPU time. One that only partly
    overlaps another (clocks rounded to the µs) is inside none."""
    by_lane: dict[str, list[Slice]] = defaultdict(list)
    for s in operators:
        by_lane[s.lane].append(s)
    for ops in by_lane.values():
        ops.sort(key=lambda s: (s.start_ns, -s.dur_ns))
        inside = [0] * len(ops)  # the time of each op's direct children
        open_: list[int] = []  # the ops (indices) holding the one at hand, outermost first
        for i, s in enumerate(ops):
            while open_ and ops[open_[-1]].start_ns + ops[open_[-1]].dur_ns <= s.start_ns:
                open_.pop()
            if open_ and s.start_ns + s.dur_ns <= ops[open_[-1]].start_ns + ops[open_[-1]].dur_ns:
                inside[open_[-1]] += s.dur_ns
            open_.append(i)
        for s, children in zip(ops, inside, strict=True):
            yield s, max(0, s.dur_ns - children)


@dataclass(frozen=True, slots=True)
class OpRow:
    """One row: one key of one rank, times in ns. ``name`` is the op type (``--by type``, ``shape``,
    ``step``) or the op's own name (``--by name``); ``ratio`` the share (%) of the rank's total time
    of its rows (of its step's, by step)."""

    rank: int
    name: str
    core_type: str
    count: int
    total_ns: int
    min_ns: int
    max_ns: int
    ratio: float
    self_ns: int | None = None  # host operators': their time less their child operators' (device: None)
    shapes: str | None = None  # by shape: the input shapes as the profiler writes them ("" if none)
    graph: int | None = None  # by step: the step's graph and id (None: activity no step bounds)
    step: int | None = None
    typed: bool = True  # False: ``name`` is a task's own name, its rank naming no op type (level 0)
    by: str = "type"  # what the rows are keyed by (one of ``BY``): the keys ``record`` prints

    @property
    def avg_ns(self) -> float:
        return self.total_ns / self.count


# -- the computation ------------------------------------------------------------------------------

def accumulate(rank: int, steps: Iterable[StepRecords], by: str = "type") -> RankOps:
    """One rank's steps (any of them, in any order) added up by ``by`` (one of ``BY``)."""
    if by not in BY:
        raise UsageError(f"--by: {by!r} is not one of {', '.join(BY)}")
    out = RankOps(rank, by)
    for batch in steps:
        out.add(batch)
    return out


def merge(a: RankOps, b: RankOps) -> RankOps:
    """Two partial sums of one rank as one (neither is changed)."""
    if (a.rank, a.by) != (b.rank, b.by):
        raise ValueError(f"cannot merge rank {a.rank} by {a.by} with rank {b.rank} by {b.by}")
    out = RankOps(a.rank, a.by, {k: v.copy() for k, v in a.device.items()},
                  {k: v.copy() for k, v in a.host.items()}, a.typed or b.typed)
    for mine, theirs in ((out.device, b.device), (out.host, b.host)):
        for key, (count, total, low, high, own) in theirs.items():
            held = mine.get(key)
            if held is None:
                mine[key] = [count, total, low, high, own]
            else:
                held[0] += count
                held[1] += total
                held[2] = min(held[2], low)
                held[3] = max(held[3], high)
                held[4] += own
    return out


def combine(partials: Iterable[RankOps]) -> list[OpRow]:
    """The rows of every rank: partials of one rank merged, in any split or order; ranks in order,
    each rank's rows by total time, largest first (by step: steps in order, then by total time)."""
    ranks: dict[int, RankOps] = {}
    for part in partials:
        ranks[part.rank] = merge(ranks[part.rank], part) if part.rank in ranks else part
    rows: list[OpRow] = []
    for rank in sorted(ranks):
        rows.extend(_rows(ranks[rank]))
    return rows


def _rows(ops: RankOps) -> list[OpRow]:
    """A rank's rows from its device ops, else its host operators; Ratio of its total (by step: of
    its step's)."""
    figures, by_step = ops.device or ops.host, ops.by == "step"
    totals: dict[Any, int] = defaultdict(int)
    for (_, _, extra), (_, total, *_) in figures.items():
        totals[extra if by_step else None] += total
    rows = []
    for (name, core, extra), (count, total, low, high, own) in figures.items():
        whole = totals[extra if by_step else None]
        row = OpRow(ops.rank, name, core, count, total, low, high, total / whole * 100 if whole else 0.0,
                    self_ns=None if ops.device else own, shapes=extra if ops.by == "shape" else None,
                    graph=extra[2] if by_step else None, step=extra[1] if by_step else None,
                    typed=ops.typed or not ops.device or ops.by == "name", by=ops.by)
        # steps in order (activity no step bounds last), then by total time, largest first
        step = (extra[1] is None, extra[0], extra[1] or 0) if by_step else ()
        rows.append(((*step, -total, name, core, row.shapes or ""), row))
    rows.sort(key=lambda pair: pair[0])
    return [row for _, row in rows]


@dataclass(frozen=True, slots=True)
class SpreadRow:
    """One key (an op type and core type, by default) across the ranks that ran it: the min,
    median and max of their totals (ns), the slowest and the fastest rank (the lowest rank among
    equal totals). ``shapes``, ``graph`` and ``step`` as the rows they come from carry them."""

    name: str
    core_type: str
    ranks: int
    min_ns: int
    median_ns: float  # the mean of the middle two where the ranks are even in number
    max_ns: int
    slowest_rank: int
    fastest_rank: int
    shapes: str | None = None
    graph: int | None = None
    step: int | None = None
    by: str = "type"  # as the rows it comes from

    @property
    def gap_ns(self) -> float:
        """How far the slowest rank is above the middle one: what the rows are ranked by."""
        return self.max_ns - self.median_ns

    @property
    def max_over_median(self) -> float | None:
        """None where the median is 0 (ops that took no measurable time): no ratio, not 1."""
        return self.max_ns / self.median_ns if self.median_ns else None


def across(rows: Iterable[OpRow]) -> list[SpreadRow]:
    """Per-rank rows (``combine``'s, any ``by``) as one row per key across the ranks: how many
    ranks ran it and the spread of their totals; rows by max minus median, largest first (then by
    key). A rank without a key is not counted for it (``ranks`` says how many did), never as 0.
    The ranks' order in ``rows`` does not matter."""
    totals: dict[tuple, list[tuple[int, int]]] = defaultdict(list)  # key -> [(total, rank)]
    for row in rows:
        key = (row.name, row.core_type, row.shapes, row.graph, row.step, row.by)
        totals[key].append((row.total_ns, row.rank))
    out = []
    for (name, core, shapes, graph, step, by), found in totals.items():
        found.sort()  # by total, the lower rank first among equals
        values = [total for total, _ in found]
        slowest = min(found, key=lambda pair: (-pair[0], pair[1]))[1]
        out.append(SpreadRow(name, core, len(found), values[0], statistics.median(values), values[-1],
                             slowest, found[0][1], shapes, graph, step, by))
    out.sort(key=lambda r: (-r.gap_ns, r.name, r.core_type, r.shapes or "", r.graph is None, r.graph or 0,
                            r.step is None, r.step or 0))
    return out


def _step_of(batch: StepRecords) -> tuple[int, int | None, int | None]:
    """(the step's run in the job, its id, its graph): its place among the rank's steps."""
    key = batch.key
    return (key.graph if key is not None else 0, batch.step_id, batch.graph)


def _add_op(figures: dict[Key, Figures], s: Slice, core: str, by: str, step: tuple | None,
            self_ns: int | None = None) -> bool:
    """Add one op's run under its key (its self time: its own time where none is given); whether it
    names its op type (by name: not asked, True)."""
    own = s.dur_ns if self_ns is None else self_ns
    if by == "name":
        _add(figures, (s.name, core, None), s.dur_ns, own)
        return True
    if by == "shape":
        op_type, extra = _described(s.args)
    else:
        op_type, extra = _op_type(s.args), step
    _add(figures, (op_type or _mindspore_type(s.name), core, extra), s.dur_ns, own)
    return op_type is not None or _scoped_type(s.name) is not None


def _add(figures: dict[Key, Figures], key: Key, dur_ns: int, self_ns: int) -> None:
    held = figures.get(key)
    if held is None:
        figures[key] = [1, dur_ns, dur_ns, dur_ns, self_ns]
    else:
        held[0] += 1
        held[1] += dur_ns
        if dur_ns < held[2]:
            held[2] = dur_ns
        if dur_ns > held[3]:
            held[3] = dur_ns
        held[4] += self_ns


def op_type(s: Slice) -> str:
    """A device task's op type as ``--by type`` names it (the critical path's op-type what-ifs)."""
    return _op_type(s.args) or _mindspore_type(s.name)


def typed(s: Slice) -> bool:
    """Whether the input names a device task's op type (its args, or MindSpore's scope name), not
    ``op_type``'s fallback to the task's name (torch_npu at profiler level 0 records no op types)."""
    return _op_type(s.args) is not None or _scoped_type(s.name) is not None


def _described(args: Any) -> tuple[str | None, str]:
    """A task's op type (None where its args name none) and input shapes ("" where none)."""
    if args is None:
        return None, ""
    if type(args) is not dict:  # the raw JSON text (bytes, or msgspec.Raw)
        return _described_text(bytes(args))
    return _type_and_shapes(args)


def _op_type(args: Any) -> str | None:
    """A task's op type, None where its args name none; raw args are decoded only where their text
    holds one of the keys (most tasks of msprof and of GPU traces hold none: the read's cost again)."""
    if args is None:
        return None
    if type(args) is dict:
        return _type_and_shapes(args)[0]
    raw = bytes(args)
    if b'"Type"' in raw or b'"Op Type"' in raw or b'"type"' in raw:
        return _described_text(raw)[0]
    return None


@functools.lru_cache(maxsize=4096)  # MindSpore 1.x shares one args text among an op's runs
def _described_text(raw: bytes) -> tuple[str | None, str]:
    try:
        args = decoded_args(raw)
    except ValueError:
        return None, ""
    return _type_and_shapes(args) if isinstance(args, dict) else (None, "")


def _type_and_shapes(args: dict[str, Any]) -> tuple[str | None, str]:
    op_type = args.get("Type") or args.get("Op Type") or args.get("type")
    shapes = args.get("Input Shapes")
    if shapes is None:  # MindSpore 1.x: input_0, input_1, ... each with its shape
        inputs = [value.get("shape") for key, value in args.items()
                  if key.startswith("input_") and isinstance(value, dict)]
        shapes = ";".join(str(shape) for shape in inputs if shape is not None)
    return (str(op_type) if op_type else None), str(shapes).strip("\"")  # torch_npu quotes them


def _mindspore_type(name: str) -> str:
    """MindSpore's op type in its scope name (``.../Cast-op239``: Cast), else the name itself."""
    return _scoped_type(name) or name


@functools.lru_cache(maxsize=65536)  # a job's op names repeat: each searched once, not per run
def _scoped_type(name: str) -> str | None:
    """The op type MindSpore's scope name gives (``.../Cast-op239``: Cast), None if not one."""
    found = _MINDSPORE_OP.search(name)
    return found.group(1) if found else None


# -- the driver -----------------------------------------------------------------------------------

def ops_report(
    path: str | os.PathLike[str],
    *,
    by: str = "type",
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    step_marker: str | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> list[OpRow]:
    """The operator statistics of every kept rank (``by`` one of ``BY``); a rank whose input holds
    no device tasks (nor host operators) is said in a warning in ``diag`` and has no rows.

    Raises:
        UsageError: an unknown ``by``, unknown ranks or graphs, nothing recognisable under ``path``.
        InputError: an input file broken beyond recovery.
    """
    if by not in BY:
        raise UsageError(f"--by: {by!r} is not one of {', '.join(BY)}")
    profile = Profile.open(path, Options(ranks=ranks, graphs=graphs, steps=steps, step_marker=step_marker),
                           where=where, diag=diag)
    partials: list[RankOps] = profile.map(rank_ops, lambda *_: (by,))
    profile.check_steps()
    diag = profile.diag
    for part in sorted(partials, key=lambda p: p.rank):
        if part.empty:
            diag.warn("no_ops", f"rank {part.rank}: the input records no device tasks (nor host "
                      "operators) in the kept steps: no operator statistics", f"rank {part.rank}")
        elif part.device and not part.typed and by != "name":
            diag.warn("no_op_types", f"rank {part.rank}: its device tasks name no op type (torch_npu at "
                      "profiler level 0 records none): its rows are by task name, as --by name gives them, "
                      "not by op type", f"rank {part.rank}")
    return combine(partials)


def rank_ops(info: RankInfo, options: Options, diag: Diagnostics, by: str) -> RankOps:
    """One rank's sums, read as its reader says op types are read (``readers.for_ops``). Runs in a
    worker process. A file of which a summary read keeps nothing by design (host events only: a CPU
    run) is no warning here: what is true for ops, no device tasks, ``ops_report`` says."""
    info, detail = for_ops(info)
    kind = Kind.DETAIL if detail else Kind.SUMMARY
    read = Diagnostics()
    found = accumulate(info.rank, read_profile([info], dataclasses.replace(options, kind=kind), read), by)
    if not detail and not found.device and host_ops_in_detail(info):  # a CPU run: its host operators
        read = Diagnostics()
        detailed = dataclasses.replace(options, kind=Kind.DETAIL)
        found = accumulate(info.rank, read_profile([info], detailed, read), by)
    read.forget(NOTHING_DRAWN)
    diag.merge(read)
    return found


# -- its rows as records ---------------------------------------------------------------------------

KEYS = {"type": ("OP Type",), "name": ("Name",), "shape": ("OP Type", "Input Shapes"),
        "step": ("Graph", "Step", "OP Type")}
FIGURES = ("Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)",
           "Ratio(%)")  # op_statistic.csv's, in its order


SPREAD = ("Core Type", "Ranks", "Min Total Time(us)", "Median Total Time(us)", "Max Total Time(us)",
          "Max/Median", "Slowest Rank", "Fastest Rank")  # --across: the spread of the ranks' totals


SELF = "Self Time(us)"  # host operators' (key_averages()'s self CPU time), after Total Time(us)


def columns(by: str, spread: bool = False, host: bool = False, typed: bool = True) -> list[str]:
    """The columns of the table ``by`` gives: ``Rank``, its keys, then op_statistic.csv's figures
    (``host``: rows of host operators among them, with their self time); ``spread`` (``--across``):
    its keys, then the spread of the ranks' totals. ``typed``: whether the rows name op types
    (``names_types``), else their key is the tasks' Name."""
    if spread:
        return [*_key_names(by, typed), *SPREAD]
    figures = [*FIGURES[:3], SELF, *FIGURES[3:]] if host else list(FIGURES)
    return ["Rank", *_key_names(by, typed), *figures]


def names_types(rows: Iterable[OpRow]) -> bool:
    """Whether a table of ``rows`` names op types: none is a task's name standing in for its type
    (a job whose ranks all record no op type, torch_npu at profiler level 0, lists its tasks by
    Name; one of several such ranks is warned of by ``ops_report``)."""
    found = list(rows)
    return not found or any(row.typed for row in found)


def _key_names(by: str, typed: bool) -> tuple[str, ...]:
    return KEYS[by] if typed else tuple("Name" if key == "OP Type" else key for key in KEYS[by])


def with_self_time(rows: Iterable[OpRow]) -> bool:
    """Whether rows of host operators are among ``rows``: their table has a self time column."""
    return any(row.self_ns is not None for row in rows)


def record(row: OpRow, host: bool = False, typed: bool = True) -> dict:
    """One row of the ops table, in µs to the ns, under op_statistic.csv's column names, keyed as
    the row was counted (``row.by``); ``host``: with the self time column (the table's, where any
    row is a host operator's: ``with_self_time``), None for a device op's row; ``typed`` as
    ``columns``."""
    times = (_us(ns) for ns in (row.total_ns, row.min_ns, row.avg_ns, row.max_ns))
    figures = dict(zip(FIGURES, (row.core_type, row.count, *times, round(row.ratio, 3)), strict=True))
    if host:
        own = None if row.self_ns is None else _us(row.self_ns)
        figures = {key: figures[key] for key in FIGURES[:3]} | {SELF: own} | figures
    return {"Rank": row.rank, **_keys(row, typed), **figures}


def spread_record(row: SpreadRow, typed: bool = True) -> dict:
    """One row of ``ops --across``, in µs to the ns; Max/Median to 3 places (None: a median of 0)."""
    ratio = row.max_over_median
    figures = (row.core_type, row.ranks, _us(row.min_ns), _us(row.median_ns), _us(row.max_ns),
               None if ratio is None else round(ratio, 3), row.slowest_rank, row.fastest_rank)
    return {**_keys(row, typed), **dict(zip(SPREAD, figures, strict=True))}


def _keys(row: OpRow | SpreadRow, typed: bool = True) -> dict:
    keys = {"type": (row.name,), "name": (row.name,), "shape": (row.name, row.shapes),
            "step": (row.graph, row.step, row.name)}[row.by]
    return dict(zip(_key_names(row.by, typed), keys, strict=True))


def _us(ns: float) -> float:
    return round(ns / 1000, 3)
