"""Device work filed to the step that launched it, and a kernel's collective known from the op
that launched it: PyTorch profiler (Kineto) traces (docs/analysis.md §1, docs/formats.md §6).

A kernel, memcpy or memset carries the ``correlation`` id of its launch (a ``cuda_runtime`` /
``cuda_driver`` event: ``cudaLaunchKernel``, ``hipLaunchKernel``, ``cudaGraphLaunch``, ...). A GPU
runs behind its host, so the device work a step launched often runs in the next step's host
window: it belongs to the step whose ``ProfilerStep#N`` window holds its launch, as Holistic Trace
Analysis and TensorBoard's plugin file it. Device work whose launch the trace does not hold
(queued before the capture began) or whose launch lies in no step's window belongs to no step.

``Survey`` takes, in the reader's first pass, every launch (its correlation id, time and thread:
20 bytes in arrays, no Python object each) and every communication op of the host
(``record_param_comms``, ``nccl:*``, ``c10d::*``); ``Survey.launches`` turns them, once the steps
are known, into ``Launches``: the launch ids as runs of one step each (about one run a step), and
the few launches that lie in a communication op with what that op says of its collective.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import Any, NamedTuple

import msgspec

from ..model import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BARRIER,
    BROADCAST,
    COMM_GROUP_ARG,
    COMM_SEQ_ARG,
    GATHER,
    RECV,
    REDUCE,
    REDUCESCATTER,
    SCATTER,
    SEND,
    Step,
    checked_ns,
)
from ._core import RawEvents, launch_runs, survey
from .common.events import Event
from .common.spilled_flows import OUTSIDE
from .common.times import us_to_ns

COMM_OPS = ("record_param_comms", "nccl:", "c10d::")  # the host ops that launch a collective's kernels
GRAPH_LAUNCHES = ("cudaGraphLaunch", "hipGraphLaunch")  # replays: their kernels share the launch's id
# What a collective's op says of it, copied onto its kernels where they lack it (PyTorch's
# record_param_comms args, torch/csrc/profiler/util.cpp saveNcclMeta)
COLLECTIVE_ARGS = ("Collective name", COMM_GROUP_ARG, "Process Group Description", "Process Group Ranks",
                   "In msg nelems", "Out msg nelems", "In split size", "Out split size", "dtype",
                   "Group size", COMM_SEQ_ARG)
# A collective's name (record_param_comms' "Collective name", or the op's name after "nccl:" /
# "c10d::"), lower-cased without "_", by its beginning: the model's kind; the first match counts
_KINDS = (("allreduce", ALLREDUCE), ("allgather", ALLGATHER), ("reducescatter", REDUCESCATTER),
          ("alltoall", ALLTOALL), ("broadcast", BROADCAST), ("reduce", REDUCE), ("barrier", BARRIER),
          ("gather", GATHER), ("scatter", SCATTER), ("send", SEND), ("recv", RECV))


def collective_kind(name: str) -> str | None:
    """The model's kind of a collective PyTorch names ``name`` (``allreduce``, ``_allgather_base``,
    ``all_to_all``, ``alltoall_base``, ``reduce_scatter_tensor_coalesced``, ``recv_any_source``,
    ...); None for names that say no collective (``wait``, ``coalesced``)."""
    key = name.lower().replace("_", "")
    return next((kind for prefix, kind in _KINDS if key.startswith(prefix)), None)


class Collective(NamedTuple):
    """What the communication ops around a launch say of the collective its kernel runs."""

    kind: str | None  # the model's kind; None: they do not say
    args: dict[str, Any]  # COLLECTIVE_ARGS as the op gives them


class _CommOp(NamedTuple):
    start_ns: int
    end_ns: int
    name: str
    shared: dict[str, Any]  # COLLECTIVE_ARGS but Seq, one dict for the ops that give the same
    seq: Any  # Seq, where given

    @property
    def args(self) -> dict[str, Any]:
        return self.shared if self.seq is None else {**self.shared, COMM_SEQ_ARG: self.seq}


class _OpArgs(msgspec.Struct):
    correlation: Any = None


_CORRELATION = msgspec.json.Decoder(_OpArgs)
_CORRELATIONS = msgspec.json.Decoder(list[_OpArgs])


def _correlation(raw: msgspec.Raw) -> _OpArgs | None:
    try:
        return _CORRELATION.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


_NO_ARGS: dict[str, Any] = {}  # shared by the ops that give none: never changed
_ANY = msgspec.json.Decoder()


class Survey:
    """The first pass's view of a trace's launches and communication ops (``add``, a batch at a
    time, in any order); ``launches`` once the steps are known."""

    def __init__(self, offset_ns: int, launch_cats: Iterable[str], op_cats: Iterable[str]) -> None:
        """``launch_cats``, ``op_cats``: the categories of launches and of host ops, by every name
        the profiler's generations gave them."""
        self._offset = offset_ns
        self._launch_cats, self._op_cats = frozenset(launch_cats), frozenset(op_cats)
        self._ids, self._times, self._threads = array("q"), array("q"), array("i")
        self._thread_index: dict[Any, int] = {}
        self._ops: dict[int, list[_CommOp]] = {}  # by thread index
        self._shared: dict[bytes, dict[str, Any]] = {}  # the ops' args but Seq, each kind once
        self.graphs: set[int] = set()  # correlation ids of graph replays

    def add(self, events: list[Event] | RawEvents) -> None:
        """A batch's launches and communication ops; events without a usable id or time are left
        to the records pass, which says so. Every event passes here: sorted out by comprehension,
        the launches' ids decoded in one call; a scanned batch's in C by these rules
        (``c/survey.c``: no object made but for the ops and the few launches the text does not give)."""
        if type(events) is RawEvents:
            ids, times, threads = survey(events, self._launch_cats, self._op_cats, COMM_OPS,
                                         GRAPH_LAUNCHES, self._offset, self._thread_index, self.graphs,
                                         self._op, self._launch)
            self._ids.frombytes(ids)
            self._times.frombytes(times)
            self._threads.frombytes(threads)
            return
        launch_cats, op_cats = self._launch_cats, self._op_cats
        launches = [e for e in events if e.cat in launch_cats and e.ph == "X" and e.args]
        ops = [e for e in events if e.cat in op_cats and type(e.name) is str and e.name.startswith(COMM_OPS)]
        for event in ops:
            if event.ph == "X" and event.args:
                self._op(event)
        if not launches:
            return
        try:
            found = _CORRELATIONS.decode(b"[" + b",".join(bytes(e.args) for e in launches) + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):  # one at a time: those that decode
            found = [_correlation(e.args) for e in launches]
        threads = self._thread_index
        for event, args in zip(launches, found, strict=True):
            if (kept := self._kept(event, args)) is None:
                continue
            correlation, ts_ns = kept
            self._ids.append(correlation)
            self._times.append(ts_ns)
            if (thread := threads.get(event.tid)) is None:
                thread = threads[event.tid] = len(threads)
            self._threads.append(thread)
            if type(event.name) is str and event.name.startswith(GRAPH_LAUNCHES):
                self.graphs.add(correlation)

    def _launch(self, event: Event) -> tuple[int, int] | None:
        """A launch's correlation id and time (ns, with the clock offset), or None (``_kept``)."""
        return self._kept(event, _correlation(event.args))

    def _kept(self, event: Event, args: _OpArgs | None) -> tuple[int, int] | None:
        """The correlation id (an int64) and time of a launch whose args decoded as ``args``;
        None where it has none that is usable."""
        correlation = args.correlation if args is not None else None
        if type(correlation) is not int or not -(1 << 63) <= correlation < 1 << 63:
            return None
        try:
            return correlation, checked_ns(us_to_ns(event.ts) + self._offset)
        except (TypeError, ValueError, ArithmeticError):
            return None

    def _op(self, event: Event) -> None:
        name = event.name
        try:
            start_ns = checked_ns(us_to_ns(event.ts) + self._offset)
            end_ns = start_ns + us_to_ns(event.dur)
            args = _ANY.decode(event.args)
        except (msgspec.DecodeError, TypeError, ValueError, ArithmeticError):
            return
        if not isinstance(args, dict):
            args = {}
        kept = {key: args[key] for key in COLLECTIVE_ARGS if key in args and key != COMM_SEQ_ARG}
        try:
            shared = self._shared.setdefault(msgspec.json.encode(kept), kept) if kept else _NO_ARGS
        except (TypeError, OverflowError):  # a value msgspec does not write back: this op's own
            shared = kept
        op = _CommOp(start_ns, end_ns, sys.intern(name), shared, args.get(COMM_SEQ_ARG))  # names repeat
        threads = self._thread_index
        self._ops.setdefault(threads.setdefault(event.tid, len(threads)), []).append(op)

    def launches(self, steps: list[Step]) -> Launches:
        """The launches filed by step (``steps`` in order of their start), the survey's arrays
        freed."""
        ids, times, threads = self._ids, self._times, self._threads
        self._ids, self._times, self._threads = array("q"), array("q"), array("i")
        windows = array("q", (s.start_ns for s in steps)), array("q", (s.end_ns for s in steps))
        made = launch_runs(ids, times, *windows, OUTSIDE)  # runs_by_rule's, in C
        if made is None:  # a file not in launch order
            order = sorted(range(len(ids)), key=ids.__getitem__)
            ids, times, threads = (array(a.typecode, (a[i] for i in order)) for a in (ids, times, threads))
            made = launch_runs(ids, times, *windows, OUTSIDE)
        runs = _Runs(*(_array(code, data) for code, data in zip("qqi", made, strict=True)))
        ops = {thread: _Ops(found) for thread, found in self._ops.items()}
        self._ops, self._shared = {}, {}
        collectives = _Collectives()
        for i, thread in enumerate(threads) if ops else ():
            if (around := ops.get(thread)) is not None and (found := around.holding(times[i])):
                collectives.add(ids[i], found)
        return Launches(runs, collectives, self.graphs)


def runs_by_rule(ids: array, steps: Iterable[int]) -> tuple[array, array, array]:
    """The runs (``_Runs``) of launch ``ids`` in order, each with its step: their first ids, last
    ids and steps. The rule ``_core.launch_runs`` follows in C (with ``_Windows.index`` for the
    steps), kept as its reference (tests/readers/test_kineto_scan.py)."""
    firsts, lasts, numbers = array("q"), array("q"), array("i")
    last_step = last = None
    for correlation, step in zip(ids, steps, strict=True):
        if step == last_step:
            lasts[-1] = correlation
        elif correlation != last:  # an id given twice: its first launch counts
            firsts.append(correlation)
            lasts.append(correlation)
            numbers.append(step)
            last_step = step
        last = correlation
    return firsts, lasts, numbers


def _array(typecode: str, data: bytes) -> array:
    found = array(typecode)
    found.frombytes(data)
    return found


class _Runs:
    """Launch ids in order, as runs of one step: (first id, last id, step index) each, so memory
    holds about one run a step, not an entry a launch. An id within a run that no recorded launch
    has (a launch the profiler dropped) is taken as the run's step; one between runs, below the
    first or past the last has no recorded launch."""

    def __init__(self, firsts: array, lasts: array, steps: array) -> None:
        self.firsts, self.lasts, self.steps = firsts, lasts, steps

    def step(self, correlation: int) -> int | None:
        """The step of ``correlation``'s run; None where it is in none."""
        k = bisect_right(self.firsts, correlation) - 1
        return None if k < 0 or correlation > self.lasts[k] else self.steps[k]


class _Collectives:
    """The launches that lie in a communication op, in order of their id, each with the collective
    of the ops around it (one ``Collective`` for all the launches of one op)."""

    def __init__(self) -> None:
        self.ids, self.which = array("q"), array("i")
        self.found: list[Collective] = []
        self._known: dict[tuple[int, ...], int] = {}  # the ops around a launch -> their collective

    def add(self, correlation: int, ops: list[_CommOp]) -> None:
        key = tuple(map(id, ops))
        if (at := self._known.get(key)) is None:
            at = self._known[key] = len(self.found)
            self.found.append(_collective(ops))
        self.ids.append(correlation)
        self.which.append(at)

    def get(self, correlation: int) -> Collective | None:
        k = bisect_left(self.ids, correlation)
        return self.found[self.which[k]] if k < len(self.ids) and self.ids[k] == correlation else None


class Launches:
    """Which step launched each device record, by its correlation id, and the collective of the
    kernels a communication op launched."""

    def __init__(self, runs: _Runs, collectives: _Collectives, graphs: set[int]) -> None:
        self._runs, self._collectives = runs, collectives
        self._collectives._known = {}  # the ops it held are freed
        self._graphs = graphs
        self._replayed: set[int] = set()
        self.filed = bool(len(runs.steps))

    def step(self, correlation: Any) -> int:
        """The index of the step whose window holds the launch of ``correlation``; OUTSIDE where no
        step's does or the trace holds no such launch."""
        if type(correlation) is not int:
            return OUTSIDE
        step = self._runs.step(correlation)
        return OUTSIDE if step is None else step

    def collective(self, correlation: Any) -> Collective | None:
        """What the communication op that launched ``correlation`` says of its collective, if one did."""
        return self._collectives.get(correlation) if type(correlation) is int else None

    def ran(self, correlation: Any) -> None:
        """A device record of ``correlation`` is in the trace (a graph replay's kernels are)."""
        if self._graphs and correlation in self._graphs:
            self._replayed.add(correlation)

    def in_c(self, filing: bool) -> tuple[array | None, array | None, array | None, array, set[int],
                                          set[int]]:
        """What ``step``, ``collective`` and ``ran`` read, for ``_core.read_events`` to read them
        as they do (``kineto.InC``): the runs' first ids, last ids and steps (None unless
        ``filing``), the launches' ids in a communication op, the graph replays and those run."""
        runs = self._runs
        firsts, lasts, steps = (runs.firsts, runs.lasts, runs.steps) if filing else (None, None, None)
        return firsts, lasts, steps, self._collectives.ids, self._graphs, self._replayed

    def empty_replays(self) -> int:
        """Graph replays (``cudaGraphLaunch``) of which the trace holds no kernel, among those asked for."""
        return len(self._graphs - self._replayed)


class _Windows:
    """The steps' host windows: the latest-starting step whose window holds a time. Windows may
    overlap (real traces): each launch goes to one step, never two."""

    def __init__(self, steps: list[Step]) -> None:
        self._starts = [s.start_ns for s in steps]
        self._ends = [s.end_ns for s in steps]
        self._reach, last = [], None  # the latest end of any window starting at or before each one
        for end in self._ends:
            last = end if last is None else max(last, end)
            self._reach.append(last)

    def index(self, ts_ns: int) -> int:
        k = bisect_right(self._starts, ts_ns) - 1
        while k >= 0 and self._reach[k] > ts_ns:
            if ts_ns < self._ends[k]:
                return k
            k -= 1
        return OUTSIDE


class _Ops:
    """One thread's communication ops, for the ops around a time: grouped into runs of ops that
    overlap (an op nests in its caller: ``c10d::allreduce_`` > ``record_param_comms`` >
    ``nccl:all_reduce``), found by bisection."""

    def __init__(self, ops: list[_CommOp]) -> None:
        ops.sort(key=lambda op: (op.start_ns, -op.end_ns))
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._runs: list[list[_CommOp]] = []
        for op in ops:
            if self._runs and op.start_ns < self._ends[-1]:
                self._runs[-1].append(op)
                self._ends[-1] = max(self._ends[-1], op.end_ns)
            else:
                self._starts.append(op.start_ns)
                self._ends.append(op.end_ns)
                self._runs.append([op])

    def holding(self, ts_ns: int) -> list[_CommOp]:
        """The ops whose time holds ``ts_ns``, innermost (latest start) first."""
        k = bisect_right(self._starts, ts_ns) - 1
        if k < 0 or ts_ns >= self._ends[k]:
            return []
        return [op for op in reversed(self._runs[k]) if op.start_ns <= ts_ns < op.end_ns]


def _collective(ops: list[_CommOp]) -> Collective:
    """The collective the ops around a launch (innermost first) run: its kind from the innermost
    ``record_param_comms`` that names it (``Collective name``), else from the innermost
    ``nccl:*`` / ``c10d::*`` op's name that says one; its args from the ``record_param_comms``
    that gives most of them."""
    kind = None
    for op in ops:
        if op.name == "record_param_comms" and isinstance(op.args.get("Collective name"), str):
            kind = collective_kind(op.args["Collective name"])
            if kind is not None:
                break
    if kind is None:
        kind = next((k for op in ops if op.name != "record_param_comms"
                     and (k := collective_kind(op.name.partition(":")[2].lstrip(":"))) is not None), None)
    args = max((op.args for op in ops if op.name == "record_param_comms"), key=len, default=_NO_ARGS)
    return Collective(kind, args)


def with_collective(raw: bytes | memoryview, collective: Collective) -> bytes:
    """A kernel's raw JSON args with what its communication op says of its collective added,
    where the kernel's own do not say it (newer Kineto copies them onto NCCL kernels)."""
    try:
        args = _ANY.decode(raw) if raw else {}
    except msgspec.DecodeError:
        args = None
    if not isinstance(args, dict):
        return bytes(raw) if raw else b"{}"
    missing = {key: value for key, value in collective.args.items() if key not in args}
    try:
        return msgspec.json.encode({**args, **missing}) if missing else bytes(raw)
    except (TypeError, OverflowError):  # a number msgspec does not write back: the kernel's own args
        return bytes(raw)
