"""``trace2perfetto report``: where the time goes, per rank and step, and what the bottleneck is.

The timeline answers "what happened at 12:03:04.512 on rank 5"; this report answers what comes
before: which steps and ranks are slow, whether the job is bound by data loading, by the host,
by the device or by communication, and which rank and step to open on the timeline. It follows
Paddle's performance method (the IO, CPU or GPU bottleneck first, then the module, then the op)
and MindInsight's overview pages.

One read of every rank, in worker processes (``executor.each_rank``: this machine's cores or a
Dask cluster), as a summary conversion reads it. Each worker hands back small per-rank results
only: per step the overlap row (``pipeline.overlap_row``), the step's bounds, the profiler's
phases (the Step Trace lanes: Iteration Interval, FP/BP, Tail; Paddle's Dataloader, Forward,
Backward, Optimization), its device compute ops summed by name, and its communication ops in the
light form matching needs (``comm.light_ops``). Matching across ranks (``comm.match``), the wait
each rank suffered and caused, the slow-rank table (``cluster``'s helpers) and the diagnosis are
computed here.

The diagnosis (``diagnose``), per rank and step, with the thresholds of :class:`Thresholds`:

* **data loading**: the share of the step spent before the device gets work: the profiler's
  Dataloader phase (Paddle), its Iteration Interval (MindSpore, msprof step trace) or Preparing
  (from the host's step start to the first device work), whichever is largest;
* **host**: the device idle (Free: no compute and no communication between its first and last
  task, plus the time after its last task until the step ends) while the host runs the step;
  summary data has no host threads, so the host is judged busy by the step lasting;
* **device**: compute covering most of the step;
* **communication**: communication not overlapped with compute, with how much of it was spent
  waiting for a slower rank (and which);
* **straggler**: a rank the others waited for in the step's collectives (the wait it caused,
  per other rank, as a share of the step), or whose step took much longer than the median rank's.

Each finding carries its evidence in numbers and the ``trace2perfetto`` command that writes the
detail trace of exactly that rank and step.
"""

from __future__ import annotations

import dataclasses
import html
import io
import os
import re
import shlex
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

import orjson

from . import comm
from .analyses.comm import SlowRank, StepSpread, StepTime, last_arrivals, slow_ranks_of, spread_of, with_waits
from .analyses.overlap import StepOverlap, overlap_row, step_span
from .discover import discover
from .errors import Diagnostics, UsageError, as_text
from .executor import LOCAL, Where, each_rank
from .model import Layer, RankInfo, StepKey
from .output import inputs_of, open_output
from .overlap import is_compute, total_ns
from .profile import Kind, Options, input_bytes, read_profile
from .profile import aligning as _align
from .select import check_graphs, check_steps, format_ids, select_ranks

__all__ = [
    "Diagnosis", "OpTotal", "Report", "StepFacts", "Thresholds", "diagnose", "report_data", "report_json",
    "render_html", "write_html", "write_report",
]

SCHEMA = "trace2perfetto-report/1"
OPS_PER_RANK = 1000  # device op names a worker hands back per rank (by total time); the rest summed
OTHER_OPS = "(other ops)"
# The profiler's phases drawn stacked within a step, in this order; others (Reduce) are listed only
STACKED_PHASES = ("Iteration Interval", "Dataloader", "FP/BP", "Forward", "Backward", "Optimization",
                  "Tail")
DATA_LOADING_SOURCES = ("Dataloader", "Iteration Interval")  # phases that are data loading


# -- thresholds -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Thresholds:
    """Where a step counts as bound by one thing. Shares are of the step time (its host or step
    trace bounds). Change them with ``report_data(..., thresholds=Thresholds(host_idle_share=0.4))``
    or ``--threshold host_idle_share=0.4``; the report prints the ones it used."""

    data_loading_share: float = 0.2
    host_idle_share: float = 0.3
    device_compute_share: float = 0.9
    communication_share: float = 0.3
    straggler_wait_share: float = 0.1
    straggler_step_excess: float = 0.2

    MEANING: ClassVar[dict[str, str]] = {
        "data_loading_share": "data loading: the profiler's Dataloader phase, its Iteration Interval, or "
        "Preparing (host step start to the first device work), whichever is largest, at least this share "
        "of the step",
        "host_idle_share": "host bound: the device idle (Free between its tasks, plus after its last task "
        "until the step ends; no compute, no communication) at least this share of the step",
        "device_compute_share": "device bound: compute (the union of the device's compute tasks) at least "
        "this share of the step",
        "communication_share": "communication bound: communication not overlapped with compute at least "
        "this share of the step",
        "straggler_wait_share": "straggler: the wait this rank caused the others in the step's "
        "collectives, per other rank, at least this share of the median step time",
        "straggler_step_excess": "straggler: its step time above the median rank's by at least this "
        "share (2 ranks or more in the step)",
    }

    def items(self) -> list[tuple[str, float, str]]:
        """(name, value, meaning) of each threshold, in order."""
        return [(f.name, getattr(self, f.name), self.MEANING[f.name]) for f in dataclasses.fields(self)]


KINDS = ("straggler", "data_loading", "communication", "host", "device")
KIND_TITLES = {"straggler": "Straggler", "data_loading": "Data loading", "communication": "Communication",
               "host": "Host", "device": "Device", "balanced": "No bottleneck", "unknown": "Not recorded"}
KIND_COLOURS = {"straggler": "#7b3294", "data_loading": "#2c7bb6", "communication": "#d7191c",
                "host": "#fdae61", "device": "#1a9641", "balanced": "#e0e0e0", "unknown": "#ffffff"}
LANE_COLOURS = {"Preparing": "#2c7bb6", "Computing": "#1a9641", "Communication (not overlapped)": "#d7191c",
                "Free": "#bdbdbd", "Other": "#fdae61"}


# -- what the report holds ------------------------------------------------------------------------

@dataclass(slots=True)
class StepFacts:
    """One step of one rank: its bounds, the overlap row, the profiler's phases (ns by name, each
    the union of its slices) and, once matched across ranks, the wait it suffered and caused."""

    rank: int
    graph: int | None
    step: int | None
    start_ns: int
    step_ns: int  # the step's bounds (host or step trace), else its first to last device work
    host_start: bool
    overlap: StepOverlap
    phases: dict[str, int] = field(default_factory=dict)
    wait_suffered_ns: int = 0
    wait_caused_ns: int = 0
    waited_for: dict[int, int] = field(default_factory=dict)  # last rank -> wait for it, in this step
    last_arrivals: int = 0  # collectives of this step in which this rank came last (with a skew)
    key: StepKey | None = None  # the step as the job names it (graph and step above: as the rank does)

    @property
    def has_device(self) -> bool:
        return self.overlap.computing_ns is not None

    @property
    def other_ns(self) -> int | None:
        """From the last device work to the step's end (never negative); None without device."""
        o = self.overlap
        if o.computing_ns is None:
            return None
        busy = (o.preparing_ns or 0) + o.computing_ns + o.not_overlapped_ns + o.free_ns
        return max(0, self.step_ns - busy)

    @property
    def data_loading(self) -> tuple[str, int] | None:
        """The largest of the data-loading measures this input gives: (source, ns)."""
        found = [(name, self.phases[name]) for name in DATA_LOADING_SOURCES if name in self.phases]
        if self.overlap.preparing_ns is not None:
            found.append(("Preparing", self.overlap.preparing_ns))
        return max(found, key=lambda item: item[1]) if found else None


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One finding for one step of one rank: which bound, how much of the step (``share``), the
    numbers it rests on, one sentence, and the command that writes that rank and step's trace."""

    kind: str  # one of KINDS
    rank: int
    graph: int | None
    step: int | None
    share: float
    evidence: dict[str, Any]
    summary: str
    command: str


@dataclass(frozen=True, slots=True)
class OpTotal:
    """A device compute op (by name) over the kept steps: how often it ran and for how long."""

    name: str
    count: int
    total_ns: int

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


@dataclass(frozen=True, slots=True)
class SlowCollective:
    """One collective instance across its ranks: arrival skew, the last rank, the others' wait."""

    group: str
    step: int | None
    name: str
    occurrence: int
    ranks: int
    skew_ns: int
    last_rank: int
    total_wait_ns: int


@dataclass
class Report:
    """Everything the report shows, computed from one summary read of every kept rank."""

    path: str
    formats: dict[str, list[int]]  # reader format -> its ranks
    ranks: list[int]
    hosts: dict[int, str | None]  # None: not known from the profile
    input_bytes: int
    wall_clock: bool  # False: some ranks on clocks of their own, no wall time (comparable only if aligned)
    thresholds: Thresholds
    steps: list[StepFacts]  # every step judged: the kept steps, or the whole run where none is marked
    outside: list[StepFacts]  # activity outside any step (where steps are marked): shown, not judged
    diagnoses: list[Diagnosis]
    slow_ranks: list[SlowRank]
    spread: list[StepSpread]
    wait_matrix: dict[int, dict[int, int]]  # waiting rank -> rank waited for -> ns, over the steps
    collectives: int  # instances matched across two ranks or more
    slowest_collectives: list[SlowCollective]
    top_ops: list[OpTotal]  # over every kept rank, most total time first
    top_ops_by_rank: dict[int, list[OpTotal]]
    compute_ns: int  # all device compute op time (the ops' durations added up), the ops' shares' base
    compute_ns_by_rank: dict[int, int]
    clocks: list[comm.HostClock]
    aligned: bool
    selection: dict[str, list[int] | None]  # ranks, graphs, steps as asked
    warnings: list[str] = field(default_factory=list)
    inputs: list[Path] = field(default_factory=list)  # what was read: the report is never written over it

    @property
    def span_ns(self) -> tuple[int, int] | None:
        """From the first step's start to the last one's end; None if no step has a known time."""
        timed = [f for f in self.steps + self.outside if f.step_ns > 0]
        if not timed:
            return None
        return (min(f.start_ns for f in timed), max(f.start_ns + f.step_ns for f in timed))

    def findings(self) -> dict[tuple[int, int | None, int | None], list[Diagnosis]]:
        """The diagnoses by (rank, graph, step)."""
        found: dict[tuple, list[Diagnosis]] = defaultdict(list)
        for d in self.diagnoses:
            found[d.rank, d.graph, d.step].append(d)
        return found

    def verdict(self) -> dict[str, Any]:
        """The job's bottleneck, with counts per kind (``_verdict``)."""
        return _verdict(self)

    def dominant(self) -> dict[tuple[int, int | None, int | None], str]:
        """Per (rank, graph, step), the one finding it is coloured by: a straggler first (the cause
        lies on that rank), else the bound with the largest share of the step; if none, "balanced"
        where the device's side is known, else "unknown"."""
        found = self.findings()
        return {(f.rank, f.graph, f.step): _dominant(found.get((f.rank, f.graph, f.step), []), f.has_device)
                for f in self.steps}


def _dominant(found: list[Diagnosis], known: bool) -> str:
    """``known``: the step's device side is known, so no finding means no bottleneck (the host,
    device and communication bounds rest on it: without it, none passing says nothing)."""
    if not found:
        return "balanced" if known else "unknown"
    stragglers = [d for d in found if d.kind == "straggler"]
    return "straggler" if stragglers else max(found, key=lambda d: d.share).kind


# -- one read of every rank -----------------------------------------------------------------------

@dataclass
class _RankResult:
    """What a worker hands back for one rank: small, whatever the input size."""

    steps: list[StepFacts]
    ops: dict[str, list[int]]  # name -> [count, total ns], at most OPS_PER_RANK + 1 names
    comm_ops: list[comm.OpComm]
    diag: Diagnostics


def report_data(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    align: str | None = None,
    thresholds: Thresholds | None = None,
    top: int = 20,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> Report:
    """The report of the profile under ``path``: per rank and step where the time went, the
    diagnosis of each step, slow ranks and collectives, and the top device ops.

    Reads every kept rank once, in worker processes, as a summary conversion does. ``align``
    ("collectives") measures the waits between ranks on clocks aligned by the collectives' ends.
    ``top``: how many device ops to keep over all ranks (and per rank). What needed recovery in
    the input is added to ``diag``. ``where``: the ranks' work runs on this machine's cores or on a
    Dask cluster (``executor.Where``).

    Example::

        report = report_data("profiler_output/", ranks=range(8))
        write_html(report, "report.html", command="report_data(...)")

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under ``path``, a bad ``align``.
        InputError: an input file broken beyond recovery.
    """
    aligning = _align(align)
    options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=Kind.SUMMARY)
    diag = Diagnostics() if diag is None else diag
    infos = select_ranks(discover(Path(path), diag), options.ranks)
    check_graphs(infos, options.graphs)
    results: list[_RankResult | None] = [None] * len(infos)

    def collect(index: int, result: _RankResult) -> None:
        results[index] = result
        diag.merge(result.diag)

    skipped = each_rank(_rank_facts, [(info, options) for info in infos], [info.rank for info in infos],
                        collect, where, diag)
    check_steps(options.steps, diag)
    inputs = inputs_of(path, infos)
    kept = [index for index in range(len(infos)) if index not in skipped]  # unreadable ranks left out
    infos, results = [infos[i] for i in kept], [results[i] for i in kept]
    thresholds = thresholds or Thresholds()
    hosts = comm.host_names(infos)  # a clock domain per rank: its host, else the rank alone
    facts = [f for r in results for f in r.steps]
    # Activity no step bounds (before the first step, after the last) is no step: where the job
    # marks steps it is shown apart and judged on no axis; where none does, it is the whole run.
    marked = any(f.step is not None for f in facts)
    outside = [f for f in facts if marked and f.step is None]
    facts = [f for f in facts if not (marked and f.step is None)]
    ops = {info.rank: r.comm_ops for info, r in zip(infos, results, strict=True)}
    instances = comm.match(ops)
    clocks = comm.clock_offsets(instances, hosts) if len(infos) > 1 else []
    if aligning:
        instances = comm.match(ops, comm.rank_offsets(clocks))
    all_ops = [op for info in infos for op in ops[info.rank]]
    _add_waits(facts + outside, all_ops, instances)
    times = with_waits([_step_time(f) for f in facts], all_ops)
    report = Report(
        path=as_text(path),
        formats=_formats(infos),
        ranks=[info.rank for info in infos],
        hosts={info.rank: info.host for info in infos},
        input_bytes=sum(input_bytes(info) for info in infos),
        wall_clock=all(info.wall_clock for info in infos),
        thresholds=thresholds,
        steps=facts,
        outside=outside,
        diagnoses=[],
        slow_ranks=slow_ranks_of(times, last_arrivals(instances), hosts) if instances else [],
        spread=spread_of(times) if len(infos) > 1 else [],
        wait_matrix=_wait_matrix(instances),
        collectives=len(instances),
        slowest_collectives=_slowest(instances, 10),
        top_ops=[],
        top_ops_by_rank={},
        compute_ns=0,
        compute_ns_by_rank={},
        clocks=clocks,
        aligned=aligning,
        selection={"ranks": _listed(ranks), "graphs": _listed(graphs), "steps": _listed(steps)},
        inputs=inputs,
    )
    span = report.span_ns
    report.wall_clock &= span is None or span[0] >= WALL_TIME_SINCE_NS  # a clock of its own otherwise
    _top_ops(report, [(info.rank, r.ops) for info, r in zip(infos, results, strict=True)], top)
    report.diagnoses = diagnose(facts, thresholds, lambda f: trace_command(report, f))
    report.warnings = diag.messages()
    if not facts:
        report.warnings.append(f"{path}: no steps in the kept ranks, graphs and steps")
    worst = max((abs(c.offset_ns) for c in clocks), default=0)
    if not aligning and worst > 50_000:
        report.warnings.append(
            f"the hosts' clocks differ by up to {worst / 1000:.0f} µs (estimated from the collectives' "
            "ends), which the waits between ranks include; --align collectives takes it off")
    return report


def _listed(ids: Iterable[int] | None) -> list[int] | None:
    return None if ids is None else sorted(ids)


def _formats(infos: list[RankInfo]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = defaultdict(list)
    for info in infos:
        found[info.format].append(info.rank)
    return dict(found)


def _rank_facts(job: tuple[RankInfo, Options]) -> _RankResult:
    """One rank's steps, device ops and communication ops, in one summary read. Runs in a worker."""
    info, options = job
    diag = Diagnostics()
    out: list[StepFacts] = []
    ops: dict[str, list[int]] = {}
    comm_ops: list[comm.OpComm] = []
    stream, step_layer, op_layer = Layer.STREAM, Layer.STEP, Layer.COMM_OP
    for batch in read_profile([info], options, diag):
        phases: dict[str, list[tuple[int, int]]] = defaultdict(list)
        mine = []
        for s in batch.slices:
            layer = s[1]
            if layer is stream:
                if is_compute(s[7]):
                    entry = ops.get(s[3])
                    if entry is None:
                        ops[s[3]] = [1, s[5]]
                    else:
                        entry[0] += 1
                        entry[1] += s[5]
            elif layer is op_layer:
                mine.append(s)
            elif layer is step_layer:
                lane, name = s[2], s[3]
                key = name if lane == "Steps" or lane.startswith("Graph ") else lane
                if not key.startswith("Step "):
                    phases[key].append((s[4], s[4] + s[5]))
        row = overlap_row(batch)
        start, step_ns, host_start = step_span(batch)
        out.append(StepFacts(batch.rank, batch.graph, batch.step_id, start, step_ns, host_start, row,
                             {name: total_ns(spans) for name, spans in phases.items()}, key=batch.key))
        comm_ops += comm.light_ops(batch.rank, batch.graph, batch.step_id, batch.key, mine)
    if len(ops) > OPS_PER_RANK:
        ranked = sorted(ops.items(), key=lambda item: -item[1][1])
        ops = dict(ranked[:OPS_PER_RANK])
        rest = ranked[OPS_PER_RANK:]
        ops[OTHER_OPS] = [sum(c for _, (c, _) in rest), sum(t for _, (_, t) in rest)]
    return _RankResult(out, ops, comm_ops, diag)


def _step_time(f: StepFacts) -> StepTime:
    return StepTime(f.rank, f.graph, f.step, f.step_ns, f.overlap.computing_ns, f.overlap.communication_ns,
                    key=f.key)


def _add_waits(facts: list[StepFacts], ops: list[comm.OpComm], instances: list[comm.Instance]) -> None:
    """Each step's wait suffered (and for whom), caused, and how often it came last."""
    by_key = {(f.rank, f.key): f for f in facts}  # the step of the job: a graph's second loop is another
    last_op = {op.key: op for op in ops if op.key is not None and op.rank == op.last_rank}
    for op in ops:
        if op.wait_for_last_ns:
            mine = by_key.get((op.rank, op.step_key))
            if mine is not None:
                mine.wait_suffered_ns += op.wait_for_last_ns
                mine.waited_for[op.last_rank] = mine.waited_for.get(op.last_rank, 0) + op.wait_for_last_ns
            last = last_op[op.key]
            theirs = by_key.get((last.rank, last.step_key))
            if theirs is not None:
                theirs.wait_caused_ns += op.wait_for_last_ns
    for op in last_op.values():
        if op.skew_ns and (mine := by_key.get((op.rank, op.step_key))) is not None:
            mine.last_arrivals += 1


def _wait_matrix(instances: list[comm.Instance]) -> dict[int, dict[int, int]]:
    """Waiting rank -> the rank it waited for (the last to arrive) -> total wait, ns."""
    matrix: dict[int, dict[int, int]] = defaultdict(dict)
    for inst in instances:
        last = inst.last_rank
        for rank in inst.starts:
            wait = inst.wait_ns(rank)
            if wait:
                matrix[rank][last] = matrix[rank].get(last, 0) + wait
    return {rank: dict(sorted(row.items())) for rank, row in sorted(matrix.items())}


def _slowest(instances: list[comm.Instance], n: int) -> list[SlowCollective]:
    ranked = sorted((i for i in instances if i.skew_ns), key=lambda i: -i.skew_ns)[:n]
    return [SlowCollective(i.key.group, None if i.key.step is None else i.key.step.step, i.key.name,
                           i.key.occurrence, len(i.starts), i.skew_ns, i.last_rank,
                           sum(i.wait_ns(r) for r in i.starts)) for i in ranked]


def _top_ops(report: Report, per_rank: list[tuple[int, dict[str, list[int]]]], top: int) -> None:
    overall: dict[str, list[int]] = {}
    for rank, ops in per_rank:
        report.compute_ns_by_rank[rank] = sum(t for _, t in ops.values())
        mine = [OpTotal(name, c, t) for name, (c, t) in ops.items() if name != OTHER_OPS]
        report.top_ops_by_rank[rank] = sorted(mine, key=lambda o: (-o.total_ns, o.name))[:top]
        for name, (count, total) in ops.items():
            entry = overall.setdefault(name, [0, 0])
            entry[0] += count
            entry[1] += total
    report.compute_ns = sum(report.compute_ns_by_rank.values())
    report.top_ops = sorted((OpTotal(n, c, t) for n, (c, t) in overall.items() if n != OTHER_OPS),
                            key=lambda o: (-o.total_ns, o.name))[:top]


# -- the diagnosis --------------------------------------------------------------------------------

def diagnose(facts: list[StepFacts], thresholds: Thresholds,
             command: Callable[[StepFacts], str] = lambda f: "") -> list[Diagnosis]:
    """The findings of every step of every rank (see the module's docstring), in rank, graph and
    step order; ``command(facts)`` gives each its trace command."""
    peers = _peers(facts)
    out: list[Diagnosis] = []
    for f in sorted(facts, key=_order):
        if f.step_ns <= 0:
            continue
        cmd = command(f)
        for kind, share, evidence, summary in _findings(f, peers(f), thresholds):
            out.append(Diagnosis(kind, f.rank, f.graph, f.step, round(share, 4),
                                 {"step_ms": _ms(f.step_ns), **evidence}, summary, cmd))
    return out


def _findings(f: StepFacts, peers: list[StepFacts], t: Thresholds) -> Iterable[tuple[str, float, dict, str]]:
    """(kind, share, evidence, sentence) of each threshold one step of one rank passes."""
    step, o = f.step_ns, f.overlap
    if len(peers) > 1:
        median = statistics.median(p.step_ns for p in peers)
        per_other = f.wait_caused_ns / (len(peers) - 1)
        wait_share = per_other / median if median else 0.0
        excess = f.step_ns / median - 1 if median else 0.0
        if wait_share >= t.straggler_wait_share or excess >= t.straggler_step_excess:
            reason = (f"the {len(peers) - 1} other ranks waited {_ms_text(per_other)} each for it in the "
                      f"collectives ({wait_share:.0%} of the median step)"
                      if wait_share >= t.straggler_wait_share else
                      f"its step took {excess:.0%} longer than the median rank's "
                      f"({_ms_text(f.step_ns)} vs {_ms_text(median)})")
            yield "straggler", max(wait_share, excess), {
                "wait_caused_ms": _ms(f.wait_caused_ns), "wait_caused_per_other_rank_ms": _ms(per_other),
                "wait_caused_share": round(wait_share, 4), "last_arrivals": f.last_arrivals,
                "median_step_ms": _ms(median), "step_excess": round(excess, 4), "ranks_in_step": len(peers),
            }, f"Straggler: {reason}."
    loading = f.data_loading
    if loading is not None and loading[1] / step >= t.data_loading_share:
        source, ns = loading
        yield "data_loading", ns / step, {"source": source, "data_loading_ms": _ms(ns),
                                          "share": round(ns / step, 4)}, \
            f"Data loading: {source} took {_ms_text(ns)}, {ns / step:.0%} of the step" + \
            (", before the device got work." if f.has_device else ".")  # no device: none to speak of
    if o.computing_ns is None:  # no device tasks recorded: the device's side is unknown
        return
    idle = o.free_ns + (f.other_ns or 0)
    if idle / step >= t.host_idle_share:
        yield "host", idle / step, {"free_ms": _ms(o.free_ns), "after_last_device_work_ms": _ms(f.other_ns),
                                    "device_idle_ms": _ms(idle), "share": round(idle / step, 4),
                                    "computing_share": round(o.computing_ns / step, 4)}, \
            f"Host bound: the device was idle {_ms_text(idle)} ({idle / step:.0%} of the step) outside " \
            "compute and communication, waiting for the host to give it work."
    if o.computing_ns / step >= t.device_compute_share:
        yield "device", o.computing_ns / step, {"computing_ms": _ms(o.computing_ns),
                                                "share": round(o.computing_ns / step, 4)}, \
            f"Device bound: compute covered {o.computing_ns / step:.0%} of the step; the top ops are " \
            "where to look."
    if o.not_overlapped_ns / step >= t.communication_share:
        waited = max(f.waited_for.items(), key=lambda kv: kv[1], default=None)
        text = (f"; {_ms_text(f.wait_suffered_ns)} of it waiting for slower ranks (most for rank {waited[0]})"
                if waited else "")
        yield "communication", o.not_overlapped_ns / step, {
            "not_overlapped_ms": _ms(o.not_overlapped_ns), "communication_ms": _ms(o.communication_ns),
            "share": round(o.not_overlapped_ns / step, 4), "wait_suffered_ms": _ms(f.wait_suffered_ns),
            "waited_most_for_rank": waited[0] if waited else None,
        }, f"Communication bound: {_ms_text(o.not_overlapped_ns)} ({o.not_overlapped_ns / step:.0%} of the " \
           f"step) in communication not overlapped with compute{text}."


def _order(f: StepFacts) -> tuple:
    return (f.rank, -1 if f.graph is None else f.graph, -1 if f.step is None else f.step)


def _several_graphs(facts: Iterable[StepFacts]) -> bool:
    """Whether a rank has steps of more than one graph."""
    graphs: dict[int, set] = defaultdict(set)
    for f in facts:
        graphs[f.rank].add(f.graph)
    return any(len(g) > 1 for g in graphs.values())


def _peers(facts: list[StepFacts]) -> Callable[[StepFacts], list[StepFacts]]:
    """The same step on every rank (``StepKey``: ranks of one job may number their graphs
    differently, and each graph numbers its steps from 1). The pseudo step has no peers."""
    groups: dict[StepKey, list[StepFacts]] = defaultdict(list)
    for f in facts:
        if f.key is not None:
            groups[f.key].append(f)
    return lambda f: [] if f.key is None else groups[f.key]


def _step_names(facts: list[StepFacts]) -> dict[StepKey | None, str]:
    """Each step of the job as plots and tables name it: its id, and where the job has several
    graphs, the graph's id on the lowest rank that ran it (``g5 1``); ``-``: the pseudo step."""
    lowest: dict[StepKey | None, StepFacts] = {}
    for f in facts:
        if f.key not in lowest or f.rank < lowest[f.key].rank:
            lowest[f.key] = f
    several = len({k.graph for k in lowest if k is not None}) > 1
    return {k: "-" if k is None else f"g{f.graph} {k.step}" if several else str(k.step)
            for k, f in lowest.items()}


def trace_command(report: Report, f: StepFacts) -> str:
    """The command that writes the detail trace of exactly this rank and step."""
    parts = ["trace2perfetto", report.path, "--ranks", str(f.rank)]
    name = f"rank{f.rank}"
    if f.graph is not None:
        parts += ["--graphs", str(f.graph)]
        name += f"-graph{f.graph}"
    if f.step is not None:
        parts += ["--steps", str(f.step)]
        name += f"-step{f.step}"
    parts += ["--kind", "detail"]
    if report.aligned:
        parts += ["--align", "collectives"]
    return shlex.join(parts + ["-o", f"{name}.pftrace"])


# -- numbers --------------------------------------------------------------------------------------

def _ms(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 6)


def _ms_text(ns: float) -> str:
    ms = ns / 1e6
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:,.0f} ms"


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat(timespec="milliseconds")


WALL_TIME_SINCE_NS = 946_684_800 * 10**9  # 2000-01-01: earlier "epoch" times are a clock of its own


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


# -- JSON -----------------------------------------------------------------------------------------

def report_json(report: Report) -> dict[str, Any]:
    """The report's numbers as one JSON-ready dict (ms; ``schemas/report.schema.json``)."""
    span = report.span_ns
    by_step = report.findings()
    return {
        "schema": SCHEMA,
        "job": {
            "path": report.path,
            "formats": report.formats,
            "ranks": report.ranks,
            "hosts": {str(rank): host for rank, host in sorted(report.hosts.items())},  # null: unknown
            "graphs": sorted({f.graph for f in report.steps if f.graph is not None}),
            "steps": sorted({f.step for f in report.steps if f.step is not None}),
            "rank_steps": len(report.steps),
            "start_ns": span[0] if span else None,
            "end_ns": span[1] if span else None,
            "span_ms": _ms(span[1] - span[0]) if span else None,
            "wall_clock": report.wall_clock,
            "aligned": report.aligned,
            "input_bytes": report.input_bytes,
            "selection": report.selection,
        },
        "thresholds": {name: value for name, value, _ in report.thresholds.items()},
        "verdict": _verdict(report),
        "steps": [_step_record(f, by_step.get((f.rank, f.graph, f.step), [])) for f in report.steps],
        "outside_steps": [_step_record(f, [], judged=False) for f in report.outside],
        "diagnoses": [{"kind": d.kind, "rank": d.rank, "graph": d.graph, "step": d.step, "share": d.share,
                       "evidence": d.evidence, "summary": d.summary, "command": d.command}
                      for d in report.diagnoses],
        "slow_ranks": [{"rank": r.rank, "host": report.hosts.get(r.rank), "steps": r.steps,
                        "wait_caused_ms": _ms(r.wait_caused_ns), "wait_suffered_ms": _ms(r.wait_suffered_ns),
                        "last_arrivals": r.last_arrivals, "mean_step_ms": _ms(r.mean_step_ns),
                        "mean_computing_ms": _ms(r.mean_computing_ns),
                        "mean_communication_ms": _ms(r.mean_communication_ns)} for r in report.slow_ranks],
        "spread": [{"graph": s.graph, "step": s.step, "ranks": s.ranks, "fastest_ms": _ms(s.min_ns),
                    "slowest_ms": _ms(s.max_ns), "slowest_rank": s.slowest_rank} for s in report.spread],
        "wait_matrix": [{"rank": rank, "waited_for": [{"rank": other, "wait_ms": _ms(ns)}
                                                      for other, ns in row.items()]}
                        for rank, row in report.wait_matrix.items()],
        "collectives": {
            "matched": report.collectives,
            "slowest": [{"group": c.group, "step": c.step, "name": c.name, "occurrence": c.occurrence,
                         "ranks": c.ranks, "skew_ms": _ms(c.skew_ns), "last_rank": c.last_rank,
                         "total_wait_ms": _ms(c.total_wait_ns)} for c in report.slowest_collectives],
        },
        "top_ops": {
            "compute_ms": _ms(report.compute_ns),
            "all": [_op_record(o, report.compute_ns) for o in report.top_ops],
            "by_rank": [{"rank": rank, "compute_ms": _ms(report.compute_ns_by_rank.get(rank, 0)),
                         "ops": [_op_record(o, report.compute_ns_by_rank.get(rank, 0)) for o in ops]}
                        for rank, ops in sorted(report.top_ops_by_rank.items())],
        },
        "clocks": [{"host": c.host, "ranks": list(c.ranks), "offset_us": c.offset_ns / 1000,
                    "spread_us": c.spread_ns / 1000, "collectives": c.instances} for c in report.clocks],
        "warnings": report.warnings,
    }


def _step_record(f: StepFacts, found: list[Diagnosis], judged: bool = True) -> dict[str, Any]:
    """``judged``: False for activity outside the steps, which is shown, never judged: its
    dominant finding is unknown, not balanced."""
    o = f.overlap
    return {
        "rank": f.rank, "graph": f.graph, "step": f.step, "start_ns": f.start_ns, "step_ms": _ms(f.step_ns),
        "host_start": f.host_start, "preparing_ms": _ms(o.preparing_ns), "computing_ms": _ms(o.computing_ns),
        "communication_ms": _ms(o.communication_ns), "not_overlapped_ms": _ms(o.not_overlapped_ns),
        "overlapped_ms": _ms(o.overlapped_ns), "free_ms": _ms(o.free_ns), "bubble_ms": _ms(o.bubble_ns),
        "other_ms": _ms(f.other_ns), "phases_ms": {name: _ms(ns) for name, ns in sorted(f.phases.items())},
        "wait_suffered_ms": _ms(f.wait_suffered_ns), "wait_caused_ms": _ms(f.wait_caused_ns),
        "last_arrivals": f.last_arrivals, "diagnoses": [d.kind for d in found],
        "dominant": _dominant(found, f.has_device) if judged else "unknown",
    }


def _op_record(o: OpTotal, base: int) -> dict[str, Any]:
    return {"name": o.name, "count": o.count, "total_ms": _ms(o.total_ns), "mean_ms": _ms(o.mean_ns),
            "share": round(o.total_ns / base, 4) if base else 0.0}


def _verdict(report: Report) -> dict[str, Any]:
    """The job's bottleneck: the dominant finding with the most step time, with counts per kind;
    a straggler instead where the others' communication bound steps mostly wait for it (the cause
    lies on the straggler, not on the links). ``look_at``: its worst rank and step. It rests on
    the rank-steps it can judge: those without a finding whose device side is unknown are
    counted apart ("unknown") and said, never taken for balanced."""
    counts: Counter[str] = Counter()
    weight: Counter[str] = Counter()
    dominant = report.dominant()
    for f in report.steps:
        kind = dominant[f.rank, f.graph, f.step]
        counts[kind] += 1
        if kind != "unknown":
            weight[kind] += f.step_ns
    found = [k for k in KINDS if counts[k]]
    unjudged, steps = counts["unknown"], len(report.steps) - counts["unknown"]  # steps: those judged
    main = max(found, key=lambda k: weight[k]) if found else "balanced" if steps else "unknown"
    total = sum(weight.values())
    by_kind: dict[str, list[Diagnosis]] = defaultdict(list)
    for d in report.diagnoses:
        by_kind[d.kind].append(d)
    slow = sorted({d.rank for d in by_kind["straggler"]})
    summary = (f"Mostly {KIND_TITLES[main].lower()} bound: the dominant finding in {counts[main]} of {steps} "
               f"rank-steps ({weight[main] / total:.0%} of the step time)." if found else
               "No bottleneck passed its threshold in any step.")
    if main == "straggler":
        summary = (f"Straggler: rank {format_ids(slow)} kept the others waiting; the dominant finding in "
                   f"{counts[main]} of {steps} rank-steps.")
    elif main == "communication" and slow:
        bound = {(d.rank, d.graph, d.step) for d in by_kind["communication"]}
        mine = [f for f in report.steps if (f.rank, f.graph, f.step) in bound]
        waiting = sum(f.waited_for.get(rank, 0) for f in mine for rank in slow)
        exposed = sum(f.overlap.not_overlapped_ns or 0 for f in mine)
        if exposed and waiting / exposed >= 0.5:
            summary = (f"Straggler: rank {format_ids(slow)} kept the others waiting. {counts[main]} of "
                       f"{steps} rank-steps are communication bound, and {waiting / exposed:.0%} of their "
                       f"communication not overlapped with compute is waiting for rank {format_ids(slow)}.")
            main = "straggler"
    if unjudged:  # the judged ones' verdict, then how many it could not judge
        unknown = (f"{unjudged} of {len(report.steps)} rank-steps could not be judged: the input records "
                   "no device work in them, so whether they were host, device or communication bound is "
                   "unknown (not none).")
        summary = f"{summary} {unknown}" if steps else f"No rank-step could be judged. {unknown}"
    worst = max(by_kind[main], key=lambda d: d.share, default=None)
    look_at = None if worst is None else {"rank": worst.rank, "graph": worst.graph, "step": worst.step,
                                          "summary": worst.summary, "command": worst.command}
    return {"dominant": main, "rank_steps": len(report.steps), "summary": summary, "look_at": look_at,
            "counts": {k: counts[k] for k in (*KINDS, "balanced", "unknown") if counts[k]},
            "time_share": {k: round(weight[k] / total, 4) for k in (*KINDS, "balanced") if weight[k]} if total
            else {}}


# -- plots ----------------------------------------------------------------------------------------

def _need_matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure
    except ImportError as e:  # a dependency of the package; say what to do if it went missing
        raise UsageError("the HTML report needs matplotlib (pip install matplotlib); "
                         "--format json works without it") from e
    return Figure


# Text stays text (the page's fonts draw it: small, selectable); images inline (no files beside)
_RC = {"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9, "axes.titlesize": 10,
       "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"], "svg.image_inline": True,
       "axes.spines.top": False, "axes.spines.right": False}


class _Plots:
    """matplotlib figures to inline SVG, each with ids of its own (several share one page)."""

    def __init__(self) -> None:
        self.Figure = _need_matplotlib()
        self.count = 0

    def figure(self, width: float, height: float):
        return self.Figure(figsize=(width, height), layout="constrained")

    def svg(self, fig, label: str) -> str:
        import matplotlib

        self.count += 1
        prefix = f"f{self.count}-"
        buf = io.StringIO()
        with matplotlib.rc_context({"svg.hashsalt": prefix}):
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        text = buf.getvalue()
        text = text[text.index("<svg"):]
        text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m[1]}"', text)
        text = re.sub(r'url\(#([^)]+)\)', lambda m: f"url(#{prefix}{m[1]})", text)
        text = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m[1]}"', text)
        text = text.replace("<svg ", f'<svg role="img" aria-label="{html.escape(label)}" class="plot" ', 1)
        return text


def _grid(report: Report) -> tuple[list[tuple[int, int | None]], list[Any], dict[tuple, StepFacts]]:
    """Rows (rank, or rank and graph where a rank has several), columns (steps) and the cells."""
    by_graph = _several_graphs(report.steps)
    rows = sorted({(f.rank, f.graph if by_graph else None) for f in report.steps},
                  key=lambda r: (r[0], -1 if r[1] is None else r[1]))
    cols = sorted({f.step for f in report.steps}, key=lambda s: -1 if s is None else s)
    cells = {((f.rank, f.graph if by_graph else None), f.step): f for f in report.steps}
    return rows, cols, cells


def _row_label(row: tuple[int, int | None]) -> str:
    return f"{row[0]}" if row[1] is None else f"{row[0]} g{row[1]}"


def _axis_labels(ax, axis: str, labels: list[str], limit: int | None = None) -> None:
    """At most ``limit`` labels (by default 25 across, 40 down), evenly spaced."""
    limit = limit or (25 if axis == "x" else 40)
    step = max(1, -(-len(labels) // limit))
    ticks = list(range(0, len(labels), step))
    if axis == "x":
        ax.set_xticks(ticks, [labels[i] for i in ticks])
    else:
        ax.set_yticks(ticks, [labels[i] for i in ticks])


def _heatmap(plots: _Plots, report: Report) -> str:
    import matplotlib
    import numpy as np

    rows, cols, cells = _grid(report)
    data = np.full((len(rows), len(cols)), np.nan)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            if (f := cells.get((row, col))) is not None:
                data[i, j] = f.step_ns / 1e6
    fig = plots.figure(9.5, min(12.0, max(2.4, 0.16 * len(rows) + 1.3)))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["YlOrRd"].with_extremes(bad="#f4f4f4")  # bad: no such step on that rank
    image = ax.imshow(data, aspect="auto", interpolation="none", cmap=cmap, **_honest_scale(data))
    fig.colorbar(image, ax=ax, label="step time (ms)", shrink=0.9).solids.set_rasterized(True)
    _axis_labels(ax, "x", ["-" if c is None else str(c) for c in cols])
    _axis_labels(ax, "y", [_row_label(r) for r in rows])
    ax.set_xlabel("step")
    ax.set_ylabel("rank" + (" (g: graph)" if any(r[1] is not None for r in rows) else ""))
    ax.spines[:].set_visible(False)
    return plots.svg(fig, "Step time per rank and step")


def _honest_scale(data) -> dict[str, float]:
    """Colour limits at least 10% of the median wide: a spread of 1% does not look like 100%."""
    import numpy as np

    known = data[~np.isnan(data)]
    if not known.size:
        return {}
    low, high, middle = float(known.min()), float(known.max()), float(np.median(known))
    half = 0.05 * middle
    if high - low >= 2 * half:
        return {"vmin": low, "vmax": high}
    return {"vmin": max(0.0, min(low, middle - half)), "vmax": max(high, middle + half)}


def _stacked(plots: _Plots, labels: list[str], series: dict[str, list[float]], colours: dict[str, str],
             xlabel: str, title: str, line: list[float] | None = None, line_label: str = "") -> str:
    from matplotlib.collections import PolyCollection

    fig = plots.figure(9.5, 3.2)
    ax = fig.subplots()
    x = list(range(len(labels)))
    bottom = [0.0] * len(labels)
    half = 0.4 if len(labels) > 1 else 0.2
    handles = []
    for name, values in series.items():
        if any(values):  # one collection per series: a Rectangle per bar draws 2-4x slower
            bars = [[(i - half, b), (i + half, b), (i + half, b + v), (i - half, b + v)]
                    for i, b, v in zip(x, bottom, values, strict=True)]
            handles.append(ax.add_collection(PolyCollection(bars, facecolors=colours.get(name), linewidths=0,
                                                            label=name)))
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylim(0, max(max(bottom), max(line or [0])) * 1.05 or 1)
    handles.reverse()  # top to bottom, as stacked
    if line is not None:
        handles.insert(0, ax.plot(x, line, linestyle="none", marker="_", markersize=9, color="black",
                                  label=line_label)[0])
    _axis_labels(ax, "x", labels)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return plots.svg(fig, title)


def _mean(values: Iterable[float | None]) -> float:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else 0.0


def _breakdown(report: Report, by: str) -> tuple[list[str], dict[str, list[float]], list[float]]:
    """Mean over ranks per step (``by="step"``) or over steps per rank: ms per lane, and the
    slowest step time of each bar."""
    keyed: dict[Any, list[StepFacts]] = defaultdict(list)
    for f in report.steps:
        keyed[f.key if by == "step" else f.rank].append(f)
    keys = sorted(keyed, key=lambda k: () if k is None else k)  # steps (the pseudo step first), or ranks
    lanes: dict[str, list[float]] = {name: [] for name in LANE_COLOURS}
    for k in keys:
        mine = [f for f in keyed[k] if f.has_device]
        lanes["Preparing"].append(_mean(f.overlap.preparing_ns for f in mine) / 1e6)
        lanes["Computing"].append(_mean(f.overlap.computing_ns for f in mine) / 1e6)
        lanes["Communication (not overlapped)"].append(_mean(f.overlap.not_overlapped_ns for f in mine) / 1e6)
        lanes["Free"].append(_mean(f.overlap.free_ns for f in mine) / 1e6)
        lanes["Other"].append(_mean(f.other_ns for f in mine) / 1e6)
    slowest = [max(f.step_ns for f in keyed[k]) / 1e6 for k in keys]
    names = _step_names(report.steps) if by == "step" else {k: str(k) for k in keys}
    return [names[k] for k in keys], lanes, slowest


def _phases(report: Report) -> tuple[list[str], dict[str, list[float]], list[str]] | None:
    names = {name for f in report.steps for name in f.phases}
    if not names:
        return None
    stacked = [n for n in STACKED_PHASES if n in names]
    keyed: dict[StepKey | None, list[StepFacts]] = defaultdict(list)
    for f in report.steps:
        keyed[f.key].append(f)
    keys = sorted(keyed, key=lambda k: () if k is None else k)
    series: dict[str, list[float]] = {n: [] for n in (*stacked, "Not marked")}
    for k in keys:
        mine = keyed[k]
        for n in stacked:
            series[n].append(_mean(f.phases.get(n, 0) for f in mine) / 1e6)
        series["Not marked"].append(_mean(max(0, f.step_ns - sum(f.phases.get(n, 0) for n in stacked))
                                          for f in mine) / 1e6)
    labels = _step_names(report.steps)
    return [labels[k] for k in keys], series, sorted(names - set(stacked))


_PHASE_COLOURS = {"Iteration Interval": "#2c7bb6", "Dataloader": "#2c7bb6", "FP/BP": "#1a9641",
                  "Forward": "#1a9641", "Backward": "#a6d96a", "Optimization": "#fdae61", "Tail": "#d7191c",
                  "Not marked": "#d0d0d0"}


def _diagnosis_grid(plots: _Plots, report: Report) -> str:
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    rows, cols, cells = _grid(report)
    dominant = report.dominant()
    order = [*KINDS, "balanced", "unknown"]
    data = np.full((len(rows), len(cols)), order.index("unknown"))
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            if (f := cells.get((row, col))) is not None:
                data[i, j] = order.index(dominant[f.rank, f.graph, f.step])
    fig = plots.figure(9.5, min(12.0, max(2.4, 0.16 * len(rows) + 1.3)))
    ax = fig.subplots()
    ax.imshow(data, aspect="auto", interpolation="none", vmin=0, vmax=len(order) - 1,
              cmap=ListedColormap([KIND_COLOURS[k] for k in order]))
    _axis_labels(ax, "x", ["-" if c is None else str(c) for c in cols])
    _axis_labels(ax, "y", [_row_label(r) for r in rows])
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    present = sorted(set(data.flat), key=int)
    handles = [Patch(facecolor=KIND_COLOURS[order[i]], edgecolor="#999999", label=KIND_TITLES[order[i]])
               for i in present]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return plots.svg(fig, "Diagnosis per rank and step")


def _wait_heatmap(plots: _Plots, report: Report) -> str:
    import matplotlib
    import numpy as np

    ranks = report.ranks
    index = {r: i for i, r in enumerate(ranks)}
    data = np.zeros((len(ranks), len(ranks)))
    for rank, row in report.wait_matrix.items():
        for other, ns in row.items():
            data[index[rank], index[other]] = ns / 1e6
    side = min(7.5, max(3.2, 0.12 * len(ranks) + 2.4))
    fig = plots.figure(side + 1.2, side)
    ax = fig.subplots()
    cmap = matplotlib.colormaps["Purples"].with_extremes(bad="#f7f7f7")  # bad: no wait
    image = ax.imshow(np.where(data > 0, data, np.nan), interpolation="none", cmap=cmap, vmin=0)
    fig.colorbar(image, ax=ax, label="total wait (ms)", shrink=0.85).solids.set_rasterized(True)
    labels = [str(r) for r in ranks]
    _axis_labels(ax, "x", labels, 32)
    _axis_labels(ax, "y", labels, 32)
    ax.set_xlabel("rank waited for (arrived last)")
    ax.set_ylabel("rank that waited")
    ax.spines[:].set_visible(False)
    return plots.svg(fig, "Wait between ranks")


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n // 2 - 1] + "…" + name[-(n // 2 - 1):]


CHART_OPS = 15  # ops in the chart; the table under it lists all of --top


def _ops_chart(plots: _Plots, report: Report) -> str:
    ops = report.top_ops[:CHART_OPS][::-1]
    fig = plots.figure(9.5, 0.24 * len(ops) + 1.0)
    ax = fig.subplots()
    ax.barh(range(len(ops)), [o.total_ns / 1e6 for o in ops], color="#1a9641", height=0.7)
    ax.set_yticks(range(len(ops)), [_short(o.name) for o in ops], fontsize=8)
    ax.set_xlabel("total time over the kept ranks and steps (ms)")
    return plots.svg(fig, "Top device ops by total time")


# -- HTML -----------------------------------------------------------------------------------------

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
  margin: 0; color: #222; background: #fafafa; line-height: 1.45; }
main { max-width: 1180px; margin: 0 auto; padding: 12px 24px 48px; background: #fff; }
h1 { font-size: 1.5em; margin: 0.4em 0 0.2em; } h2 { font-size: 1.2em; margin-top: 1.8em;
  border-bottom: 1px solid #ddd; padding-bottom: 3px; } h3 { font-size: 1.02em; margin-bottom: 0.3em; }
nav { font-size: 0.9em; margin: 0.4em 0 1em; } nav a { margin-right: 1em; }
table { border-collapse: collapse; font-size: 0.86em; margin: 0.4em 0 0.8em; display: block; max-width: 100%;
  overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 2px 7px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fbfbfb; }
code, .cmd { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.92em; }
.cmd { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; user-select: all; }
.cmd span { white-space: nowrap; }
figure { margin: 0.6em 0 1.2em; } figcaption { font-size: 0.85em; color: #555; }
svg.plot { max-width: 100%; height: auto; display: block; }
.kind { display: inline-block; padding: 0 6px; border-radius: 3px; font-size: 0.85em; color: #fff; }
.verdict { font-size: 1.08em; padding: 8px 12px; border-left: 5px solid #888; background: #f6f6f6; }
.warn { color: #8a4b00; } .muted { color: #666; font-size: 0.88em; }
dl.job { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0.3em 0; }
dl.job dt { font-weight: 600; } dl.job dd { margin: 0; }
details { margin: 0.2em 0; } summary { cursor: pointer; }
"""

_NAV = [("job", "Job"), ("verdict", "Verdict"), ("step-time", "Step time"), ("breakdown", "Breakdown"),
        ("diagnosis", "Diagnosis"), ("ranks", "Slow ranks"), ("ops", "Top ops"), ("method", "Method")]
ROWS_PER_KIND = 12  # findings listed per kind in the HTML (all of them are in --format json)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _cmd(command: str) -> str:
    """A command to copy: it wraps between its words only, never inside a path or an option (a
    browser breaks lines after hyphens and slashes too, so each word is kept whole)."""
    words = " ".join(f"<span>{_e(word)}</span>" for word in command.split(" "))
    return f'<span class="cmd">{words}</span>'


def _kind_badge(kind: str) -> str:
    colour = KIND_COLOURS[kind]
    text_colour = "#222" if kind in ("host", "balanced", "unknown") else "#fff"
    style = f"background:{colour};color:{text_colour}"
    return f'<span class="kind" style="{style}">{_e(KIND_TITLES[kind])}</span>'


def _table(header: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{_e(c)}</td>' if i in numeric else f"<td>{c}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _num(ns: float | None, digits: int = 3) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.{digits}f}"


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{caption}</figcaption></figure>"


def render_html(report: Report, command: str) -> str:
    """The report as one self-contained HTML page: inline CSS and SVG, no script, no network."""
    plots = _Plots()
    import matplotlib

    with matplotlib.rc_context(_RC):
        return _page(plots, report, command)


def _page(plots: _Plots, report: Report, command: str) -> str:
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             f"<title>trace2perfetto report: {_e(Path(report.path).name or report.path)}</title>"
             f"<style>{_CSS}</style></head><body><main>"]
    parts.append(f"<h1>Where the time goes: {_e(Path(report.path).name or report.path)}</h1>")
    parts.append("<nav>" + "".join(f'<a href="#{i}">{t}</a>' for i, t in _NAV) + "</nav>")
    parts.append(_job_section(report, command))
    parts.append(_verdict_section(report))
    if report.steps:
        parts.append('<section id="step-time"><h2>Step time per rank</h2>')
        parts.append(_figure(_heatmap(plots, report), "Each cell one step of one rank; the colour its time "
                             "(the step's bounds as the profiler marks them). A column of one colour is a "
                             "step the ranks share; one dark cell, a rank that was slow in that step."))
        parts.append(_spread_table(report) + "</section>")
        parts.append(_breakdown_section(plots, report))
        parts.append(_diagnosis_section(plots, report))
    parts.append(_ranks_section(plots, report))
    parts.append(_ops_section(plots, report))
    parts.append(_method_section(report))
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _job_section(report: Report, command: str) -> str:
    span = report.span_ns
    steps = sorted({f.step for f in report.steps if f.step is not None})
    job_steps = len({f.key for f in report.steps if f.key is not None})  # each graph's steps from 1
    graphs = sorted({f.graph for f in report.steps if f.graph is not None})
    formats = ", ".join(f"{name} (rank {format_ids(ranks)})" for name, ranks in report.formats.items())
    known = sorted({h for h in report.hosts.values() if h})
    if span is None:
        when = "-"
    elif report.wall_clock:
        when = f"{_iso(span[0])} to {_iso(span[1])} ({_ms_text(span[1] - span[0])})"
    else:  # a relative clock is no date: its span only
        why = "times on the ranks' own clocks, not wall time" + (
            "; aligned by their collectives" if report.aligned else "" if len(report.ranks) < 2 else
            ", and not comparable across ranks")
        when = f"{_ms_text(span[1] - span[0])} <span class=warn>({why})</span>"
    on_hosts = f" on {len(known)} host{'s' if len(known) > 1 else ''}" if known else ""
    items = [
        ("Profile", f"<code>{_e(report.path)}</code>"),
        ("Format", _e(formats)),
        ("Ranks", f"{len(report.ranks)}: {_e(format_ids(report.ranks))}" + on_hosts),
        ("Steps", (f"{job_steps}: {_e(format_ids(steps))}" if steps else "none marked (one pseudo step)")
         + (f"; graphs {_e(format_ids(graphs))}" if graphs else "") + f"; {len(report.steps)} rank-steps"),
        ("Time span", when),
        *([("Outside steps", _outside(report))] if report.outside else []),
        ("Input", _e(_bytes(report.input_bytes))),
        ("Made by", _cmd(command)),
    ]
    rows = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)
    warnings = "".join(f'<p class="warn">Warning: {_e(w)}</p>' for w in report.warnings)
    return f'<section id="job"><h2>Job</h2><dl class="job">{rows}</dl>{warnings}</section>'


def _outside(report: Report) -> str:
    """The activity outside any step, rank by rank: shown, never judged as a step."""
    spans = ", ".join(f"rank {f.rank}" + (f" graph {f.graph}" if f.graph is not None else "")
                      + f": {_ms_text(f.step_ns)}" for f in report.outside)
    return (f"{_e(spans)} <span class=muted>(from the first to the last device work no step bounds: "
            "before the first step or after the last; not judged, and not in the step charts)</span>")


def _verdict_section(report: Report) -> str:
    verdict = _verdict(report)
    main = verdict["dominant"]
    if not verdict["rank_steps"]:
        return '<section id="verdict"><h2>Verdict</h2><p>No steps to judge.</p></section>'
    text = _e(verdict["summary"])  # the border has the finding's colour
    worst = verdict["look_at"]
    if worst is not None:
        where = f"rank {worst['rank']}" + (f", step {worst['step']}" if worst["step"] is not None else "")
        text += (f"<br>Worst: {where}. {_e(worst['summary'])}<br>Open it on the timeline: "
                 + _cmd(worst["command"]))
    counts = ", ".join(f"{_kind_badge(k)} {n}" for k, n in verdict["counts"].items())
    return (f'<section id="verdict"><h2>Verdict</h2><p class="verdict" style="border-color:'
            f'{KIND_COLOURS[main]}">{text}</p><p>Rank-steps by their dominant finding: {counts}.</p>'
            "</section>")


def _spread_table(report: Report) -> str:
    spread = sorted((s for s in report.spread if s.ranks > 1), key=lambda s: -(s.max_ns - s.min_ns))[:8]
    if not spread:
        return ""
    several = len({s.graph for s in report.spread}) > 1  # named as _step_names names them
    rows = [[_e("-" if s.step is None else f"g{s.graph} {s.step}" if several else s.step), s.ranks,
             _num(s.min_ns), _num(s.max_ns), _num(s.max_ns - s.min_ns), s.slowest_rank] for s in spread]
    return ("<h3>Steps with the widest spread across ranks</h3>"
            + _table(["Step", "Ranks", "Fastest (ms)", "Slowest (ms)", "Spread (ms)", "Slowest rank"], rows,
                     {1, 2, 3, 4, 5}))


def _breakdown_section(plots: _Plots, report: Report) -> str:
    out = ['<section id="breakdown"><h2>Where the time goes</h2>']
    if any(f.has_device for f in report.steps):
        labels, lanes, slowest = _breakdown(report, "step")
        out.append(_figure(_stacked(plots, labels, lanes, LANE_COLOURS, "step", "Breakdown per step", slowest,
                                    "slowest rank's step"),
                           "Per step, the mean over ranks: Preparing (host step start to the first device "
                           "work), Computing, Communication not overlapped with compute, Free (device idle "
                           "between its tasks) and Other (after the last device work until the step ends). "
                           "The black mark is the slowest rank's step time."))
        labels, lanes, slowest = _breakdown(report, "rank")
        out.append(_figure(_stacked(plots, labels, lanes, LANE_COLOURS, "rank", "Breakdown per rank", slowest,
                                    "slowest step"),
                           "Per rank, the mean over its steps (the black mark: its slowest step)."))
    else:
        out.append("<p>This input records no device tasks: Computing, Communication not overlapped and Free "
                   "are unknown (not zero).</p>")
    phases = _phases(report)
    if phases:
        labels, series, listed = phases
        note = f" Also marked, overlapping these: {_e(', '.join(listed))} (in the JSON)." if listed else ""
        chart = _stacked(plots, labels, series, _PHASE_COLOURS, "step", "Profiler phases per step")
        out.append(_figure(chart, "The phases the profiler marks in each step (mean over ranks); Not marked: "
                           "the rest of the step." + note))
    out.append("</section>")
    return "".join(out)


def _diagnosis_section(plots: _Plots, report: Report) -> str:
    out = ['<section id="diagnosis"><h2>Diagnosis per rank and step</h2>',
           _figure(_diagnosis_grid(plots, report),
                   "Each cell coloured by its dominant finding: a straggler first, else the bound with the "
                   "largest share of the step. Thresholds and how each is judged: see Method.")]
    by_kind: dict[str, list[Diagnosis]] = defaultdict(list)
    for d in report.diagnoses:
        by_kind[d.kind].append(d)
    graphs = any(d.graph is not None for d in report.diagnoses)
    if not by_kind:
        out.append("<p>No step of any rank passed a threshold.</p>")
    for kind in KINDS:
        found = sorted(by_kind.get(kind, []), key=lambda d: (-d.share, d.rank))
        if not found:
            continue
        rows = [[d.rank, *([d.graph] if graphs else []), "-" if d.step is None else d.step, f"{d.share:.0%}",
                 _e(d.summary), _cmd(d.command)] for d in found[:ROWS_PER_KIND]]
        more = (f'<p class="muted">and {len(found) - ROWS_PER_KIND} more (all in --format json)</p>'
                if len(found) > ROWS_PER_KIND else "")
        out.append(f"<h3>{_kind_badge(kind)} {len(found)} rank-step{'s' if len(found) > 1 else ''}</h3>"
                   + _table(["Rank", *(["Graph"] if graphs else []), "Step", "Share", "Evidence",
                             "Timeline of that rank and step"], rows, set(range(4 if graphs else 3))) + more)
    out.append("</section>")
    return "".join(out)


def _ranks_section(plots: _Plots, report: Report) -> str:
    out = ['<section id="ranks"><h2>Slowest ranks and collectives</h2>']
    if len(report.ranks) < 2 or not report.collectives:
        out.append("<p>No collective was found on two ranks or more: there is nothing to compare across "
                   "ranks.</p></section>")
        return "".join(out)
    rows = [[r.rank, _e(report.hosts.get(r.rank) or "-"), r.steps, _num(r.wait_caused_ns),
             _num(r.wait_suffered_ns), r.last_arrivals, _num(r.mean_step_ns), _num(r.mean_computing_ns),
             _num(r.mean_communication_ns)]
            for r in report.slow_ranks[:16]]
    out.append(f"<p>{report.collectives} collectives matched across ranks"
               + (" (clocks aligned by the collectives' ends)" if report.aligned else "")
               + ". Ranks by the wait they caused the others (ms; wait caused and suffered, and last "
               "arrivals: totals over the kept steps; mean: per step):</p>")
    out.append(_table(["Rank", "Host", "Steps", "Wait caused", "Wait suffered", "Last arrivals", "Mean step",
                       "Mean computing", "Mean communication"], rows, {0, 2, 3, 4, 5, 6, 7, 8}))
    if len(report.slow_ranks) > 16:
        out.append(f'<p class="muted">and {len(report.slow_ranks) - 16} more ranks (in --format json)</p>')
    if report.wait_matrix:
        out.append(_figure(_wait_heatmap(plots, report),
                           "Who waited for whom: row = the rank that waited, column = the rank that arrived "
                           "last at the collective, colour = the total wait over the kept steps."))
    if report.slowest_collectives:
        rows = [[_e(c.name), _e(c.group), "-" if c.step is None else c.step, c.occurrence, c.ranks,
                 _num(c.skew_ns), c.last_rank, _num(c.total_wait_ns)] for c in report.slowest_collectives]
        out.append("<h3>Collectives with the largest arrival skew</h3>"
                   + _table(["Collective", "Group", "Step", "#", "Ranks", "Skew (ms)", "Last rank",
                             "Total wait (ms)"], rows, {2, 3, 4, 5, 6, 7}))
    if report.clocks and len(report.clocks) > 1:
        rows = [[_e(c.host), _e(format_ids(c.ranks)), f"{c.offset_ns / 1000:+.3f}",
                 f"{c.spread_ns / 1000:.3f}", c.instances] for c in report.clocks]
        header = ["Host", "Ranks", "Offset (µs)", "Spread (µs)", "Collectives"]
        out.append("<h3>Host clocks</h3>" + _table(header, rows, {2, 3, 4}))
    out.append("</section>")
    return "".join(out)


def _ops_rows(ops: list[OpTotal], base: int) -> list[list[Any]]:
    return [[f'<span title="{_e(o.name)}">{_e(_short(o.name, 90))}</span>', o.count, _num(o.total_ns),
             _num(o.mean_ns, 4), f"{o.total_ns / base:.1%}" if base else "-"] for o in ops]


def _ops_section(plots: _Plots, report: Report) -> str:
    out = ['<section id="ops"><h2>Top device ops</h2>']
    if not report.top_ops:
        out.append("<p>No device compute ops in this input.</p></section>")
        return "".join(out)
    listed, charted = len(report.top_ops), min(CHART_OPS, len(report.top_ops))
    where = "every kept rank and step" + (", and outside steps" if report.outside else "")
    out.append(_figure(_ops_chart(plots, report), f"Device compute ops by total time over {where}: the "
                       + (f"top {charted} of the {listed} listed below." if charted < listed else
                          f"{_count(listed, 'op')} listed below.")))
    header = ["Op", "Count", "Total (ms)", "Mean (ms)", "Share of compute"]
    out.append(f"<h3>Over all ranks: the top {_count(listed, 'op')} by total time</h3>"
               + _table(header, _ops_rows(report.top_ops, report.compute_ns), {1, 2, 3, 4}))
    out.append("<h3>Per rank</h3>")
    for rank, ops in sorted(report.top_ops_by_rank.items()):
        if ops:
            base, shown = report.compute_ns_by_rank.get(rank, 0), ops[:RANK_OPS]
            out.append(f"<details><summary>Rank {rank}: {_num(base)} ms of compute; its top "
                       f"{_count(len(shown), 'op')}</summary>"
                       + _table(header, _ops_rows(shown, base), {1, 2, 3, 4}) + "</details>")
    out.append("</section>")
    return "".join(out)


RANK_OPS = 10  # ops listed per rank in the HTML (all of --top in the JSON)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _method_section(report: Report) -> str:
    rows = [[f"<code>{_e(name)}</code>", f"{value:g}", _e(meaning)] for name, value, meaning in
            report.thresholds.items()]
    return ('<section id="method"><h2>Method</h2><p>Following Paddle\'s performance method: first the '
            "bottleneck (data loading, host, device, communication, or one slow rank), then the module, then "
            "the op. All shares are of the step time: the step's bounds as the profiler marks them "
            "(ProfilerStep, ProfileStep, the step trace), else its first to last device work. Computing, "
            "Communication and Free follow torch_npu's step_trace_time.csv (trace2perfetto overlap). Summary "
            "data holds no host threads, so <em>host bound</em> is judged from the device's side: the device "
            "idle, neither computing nor communicating, while the step lasts. The waits between ranks come "
            "from the collectives matched across ranks (trace2perfetto comm --slow-ranks).</p>"
            + _table(["Threshold", "Value", "A step is flagged when"], rows, {1})
            + '<p class="muted">Made by trace2perfetto; the same numbers: <code>--format json</code> '
            "(schemas/report.schema.json).</p></section>")


def write_html(report: Report, out_path: str | os.PathLike[str], command: str) -> int:
    """Write the HTML report to ``out_path`` ("-": stdout); it appears only when complete.
    Returns the bytes written."""
    return write_report(report, out_path, command, "html")


def write_report(report: Report, out_path: str | os.PathLike[str], command: str = "",
                 fmt: str = "html") -> int:
    """Write the report as ``fmt`` ("html", or "json": ``report_json``) to ``out_path`` ("-":
    stdout); it appears only when complete, and never over an input (``output.open_output``).
    ``command``: the command line that made it, printed on the page. Returns the bytes written."""
    if fmt == "json":
        data = orjson.dumps(report_json(report), option=orjson.OPT_INDENT_2) + b"\n"
    else:
        data = render_html(report, command).encode()
    with open_output(str(out_path), report.inputs) as out:
        out.write(data)
    return len(data)
