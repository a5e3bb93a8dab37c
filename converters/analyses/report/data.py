"""The report's data: one summary read of every rank in worker processes (``rank_facts``), what
each hands back (``StepFacts``, device op totals), the whole report (``Report``, ``report_data``)
and its numbers as one JSON document (``report_json``)."""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import comm
from ...errors import Diagnostics, InputError, as_text
from ...executor import LOCAL, Where
from ...model import MINDDATA, RECV, SEND, Layer, RankInfo, StepKey
from ...output import inputs_of
from ...overlap import is_compute, total_ns
from ...profile import Kind, Options, Profile, aligning, input_bytes, read_profile
from ...readers import for_ops
from ..comm import SlowRank, StepSpread, StepTime, last_arrivals, slow_ranks_of, spread_of, with_waits
from ..comm_matrix import MatrixReport
from ..memory import PeakRow, memory_overview
from ..memory import record as memory_record
from ..ops import OpRow, RankOps, combine, rank_ops
from ..overlap import StepOverlap, overlap_row, step_span
from .baseline import Baseline, baseline_json, compare_with
from .critical import SlowStep, critical_json, detail_read
from .dataprep import data_json, queue_at_start
from .diagnosis import Diagnosis, Thresholds, diagnose, dominant_kind, ms, trace_command, verdict
from .pipelined import PipelineSection, pipeline_finding, pipeline_json, pipeline_section

SCHEMA = "trace2perfetto-report/1"
OPS_PER_RANK = 1000  # device op names a worker hands back per rank (by total time); the rest summed
OTHER_OPS = "(other ops)"
OP_TYPES_SHOWN = 8  # op types (and core types) drawn per rank: the most time over the kept ranks
DATA_LOADING_SOURCES = ("Dataloader", "Iteration Interval")  # phases that are data loading
WALL_TIME_SINCE_NS = 946_684_800 * 10**9  # 2000-01-01: earlier "epoch" times are a clock of its own


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
    wait_spans: list[tuple[int, int, int]] = field(default_factory=list)  # (last rank, start, end), each wait
    last_arrivals: int = 0  # collectives of this step in which this rank came last (with a skew)
    key: StepKey | None = None  # the step as the job names it (graph and step above: as the rank does)
    data: dict[str, float] = field(default_factory=dict)  # MindData counters at its start (dataprep.py)

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

    def exposed_wait_for(self, ranks: Iterable[int]) -> int:
        """This step's not-overlapped communication spent waiting for any of ``ranks``: the union of
        its waits for them (each from its op's start, cut at the op's end: collectives that overlap
        each other count their common wait once), at most the not-overlapped communication (a wait
        lies within communication, and its part under compute is not exposed). A part of that
        communication, so the verdict's share of it never passes 100% (docs/analysis.md section 6)."""
        wanted = set(ranks)
        covered, reach = 0, None
        for start, end in sorted((s, e) for last, s, e in self.wait_spans if last in wanted):
            if reach is None or start > reach:
                covered, reach = covered + end - start, end
            elif end > reach:
                covered, reach = covered + end - reach, end
        return min(covered, self.overlap.not_overlapped_ns or 0)

    @property
    def data_loading(self) -> tuple[str, int] | None:
        """The largest of the data-loading measures this input gives: (source, ns)."""
        found = [(name, self.phases[name]) for name in DATA_LOADING_SOURCES if name in self.phases]
        if self.overlap.preparing_ns is not None:
            found.append(("Preparing", self.overlap.preparing_ns))
        return max(found, key=lambda item: item[1]) if found else None

    @property
    def queue(self) -> tuple[float, float | None] | None:
        """(size, capacity) of the data queue at the step's start, where MindData records it."""
        return queue_at_start(self.data)


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
class RankOpTypes:
    """One rank's device op time by op type (``trace2perfetto ops``' rows): its rows of the job's
    top types (``Report.op_types_shown``, in that order; a type it did not run is absent, not 0),
    and the rest summed."""

    rank: int
    total_ns: int  # all its rows: the base of their shares
    shown: list[OpRow]
    other_types: int
    other_count: int
    other_ns: int


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
    op_types_shown: list[tuple[str, str]]  # (op type, core type): the top OP_TYPES_SHOWN over the kept ranks
    op_types: list[RankOpTypes]  # per rank that has any, as ``trace2perfetto ops`` counts them
    clocks: list[comm.HostClock]
    aligned: bool
    selection: dict[str, list[int] | None]  # ranks, graphs, steps as asked
    warnings: list[str] = field(default_factory=list)
    inputs: list[Path] = field(default_factory=list)  # what was read: the report is never written over it
    links: MatrixReport | None = None  # the links ranked (a detail read, no rows); None: no communication ops
    # Device memory of the whole collection (``analyses.memory``): the peaks per rank and component,
    # and each one's peak kind over time (ns, bytes; thinned, the peak kept). Empty: none recorded.
    memory: list[PeakRow] = field(default_factory=list)
    memory_series: dict[tuple[int, str], list[tuple[int, float]]] = field(default_factory=dict)
    baseline: Baseline | None = None  # ``--baseline``: what changed from that run
    critical: list[SlowStep] = field(default_factory=list)  # the slowest steps' critical paths (critical.py)
    pipeline: PipelineSection | None = None  # where the job sends and receives: its stages (pipelined.py)

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
        """The job's bottleneck, with counts per kind (``diagnosis.verdict``), and where it runs a
        pipeline, the pipeline's finding (``pipelined.pipeline_finding``) said after it."""
        found = verdict(self)
        finding = pipeline_finding(self.pipeline)
        if finding is None:
            return found
        said = f"{found['summary']} {finding[0].upper()}{finding[1:]}"
        return found | {"summary": said, "pipeline": finding}

    def dominant(self) -> dict[tuple[int, int | None, int | None], str]:
        """Per (rank, graph, step), the one finding it is coloured by: a straggler first (the cause
        lies on that rank), else the bound with the largest share of the step; if none, "balanced"
        where the device's side is known, else "unknown"."""
        found = self.findings()
        return {(f.rank, f.graph, f.step): dominant_kind(found.get((f.rank, f.graph, f.step), []),
                                                         f.has_device) for f in self.steps}


# -- one read of every rank -----------------------------------------------------------------------

@dataclass
class _RankResult:
    """What a worker hands back for one rank: small, whatever the input size."""

    steps: list[StepFacts]
    ops: dict[str, list[int]]  # name -> [count, total ns], at most OPS_PER_RANK + 1 names
    comm_ops: list[comm.OpComm]
    op_types: RankOps  # ``ops``' sums by op type


def report_data(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    step_marker: str | None = None,
    align: str | None = None,
    thresholds: Thresholds | None = None,
    top: int = 20,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
    baseline: str | os.PathLike[str] | None = None,
) -> Report:
    """The report of the profile under ``path``: per rank and step where the time went, the
    diagnosis of each step, slow ranks and collectives, and the top device ops; with ``baseline``
    (another run's profile), what changed from it (``diff``'s step phases and op types).

    Reads every kept rank once, in worker processes, as a summary conversion does, then once in
    detail for what no summary holds: the links (where the job communicates) and the slowest
    steps' critical paths (``critical.detail_read``). ``align``
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
    aligned = aligning(align)
    options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=Kind.SUMMARY, step_marker=step_marker)
    profile = Profile.open(path, options, where=where, diag=diag)
    inputs = inputs_of(path, profile.ranks)
    results: list[_RankResult] = profile.map(rank_facts)
    profile.check_steps()
    infos, diag = profile.ranks, profile.diag
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
    policy = comm.timeline(infos, clocks, aligned)  # the one clock policy: offsets, ranks apart
    comm.say_timeline(diag, policy)
    if policy.offsets or policy.apart:
        instances = comm.matched(ops, policy)
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
        op_types_shown=[],
        op_types=[],
        clocks=clocks,
        aligned=aligned,
        selection={"ranks": _listed(ranks), "graphs": _listed(graphs), "steps": _listed(steps)},
        inputs=inputs,
    )
    span = report.span_ns
    report.wall_clock &= span is None or span[0] >= WALL_TIME_SINCE_NS  # a clock of its own otherwise
    _top_ops(report, [(info.rank, r.ops) for info, r in zip(infos, results, strict=True)], top)
    # the plane tasks (where there is communication) and the host launches are in no summary: a detail read
    shifts = {rank: -offset for rank, offset in policy.offsets.items()}
    report.links, report.critical = detail_read(profile, facts, shifts, bool(all_ops))
    if any(op.kind in (SEND, RECV) for op in all_ops):  # point-to-point: a pipeline, maybe
        report.pipeline = pipeline_section(path, ranks=ranks, graphs=graphs, steps=steps,
                                           step_marker=step_marker, diag=diag, where=where)
    report.op_types_shown, report.op_types = op_types_by_rank(combine(r.op_types for r in results))
    report.diagnoses = diagnose(facts, thresholds, lambda f: trace_command(report, f))
    try:
        report.memory, report.memory_series = memory_overview(path, ranks=ranks, where=where, diag=diag)
    except InputError as e:  # broken memory files cost the report its memory section, not the rest
        diag.warn("no_memory", f"memory left out of the report: {e}")
    if baseline is not None:
        report.baseline = compare_with(baseline, path, ranks=ranks, steps=steps, graphs=graphs, diag=diag,
                                       where=where, step_marker=step_marker)
        report.inputs.append(Path(baseline))  # read too: the report is never written over or inside it
    report.warnings = diag.messages()
    if not facts:
        report.warnings.append(f"{path}: no steps in the kept ranks, graphs and steps")
    worst = max((abs(c.offset_ns) for c in clocks if not set(c.ranks) & set(policy.offsets)), default=0)
    if not aligned and worst > 50_000:
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


def rank_facts(info: RankInfo, options: Options, diag: Diagnostics) -> _RankResult:
    """One rank's steps, device ops, communication ops and op types (``ops``' sums) in one summary
    read; in detail where ``ops`` reads the same files so (MindSpore 1.x, Paddle: the same figures,
    and one read costs less than two); a second read, as ``ops`` makes it, only where it reads other
    files (torch_npu's kernel_details.csv beside trace_view.json). Runs in a worker."""
    out: list[StepFacts] = []
    ops: dict[str, list[int]] = {}
    comm_ops: list[comm.OpComm] = []
    stream, step_layer, op_layer = Layer.STREAM, Layer.STEP, Layer.COMM_OP
    op_info, detail = for_ops(info)
    same_read = op_info == info  # the same files: one read (in detail where ops reads them so)
    op_types = RankOps(info.rank, "type")
    read = dataclasses.replace(options, kind=Kind.DETAIL) if same_read and detail else options
    for batch in read_profile([info], read, diag):
        if same_read:
            op_types.add(batch)
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
        data = {v.lane: v.value for v in batch.samples if v.lane.startswith(MINDDATA)}
        out.append(StepFacts(batch.rank, batch.graph, batch.step_id, start, step_ns, host_start, row,
                             {name: total_ns(spans) for name, spans in phases.items()}, key=batch.key,
                             data=data))
        comm_ops += comm.light_ops(batch.rank, batch.graph, batch.step_id, batch.key, mine)
    if len(ops) > OPS_PER_RANK:
        ranked = sorted(ops.items(), key=lambda item: -item[1][1])
        ops = dict(ranked[:OPS_PER_RANK])
        rest = ranked[OPS_PER_RANK:]
        ops[OTHER_OPS] = [sum(c for _, (c, _) in rest), sum(t for _, (_, t) in rest)]
    return _RankResult(out, ops, comm_ops, op_types if same_read else rank_ops(info, options, diag, "type"))


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
                mine.wait_spans.append((op.last_rank, op.start_ns,
                                        op.start_ns + min(op.wait_for_last_ns, op.elapse_ns)))
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


def op_types_by_rank(rows: list[OpRow], shown: int = OP_TYPES_SHOWN
                     ) -> tuple[list[tuple[str, str]], list[RankOpTypes]]:
    """``ops``' rows by type as the report shows them: the ``shown`` types with the most time over
    the ranks, and per rank its rows of those and the rest summed."""
    overall: dict[tuple[str, str], int] = defaultdict(int)
    mine: dict[int, list[OpRow]] = defaultdict(list)
    for row in rows:
        overall[row.name, row.core_type] += row.total_ns
        mine[row.rank].append(row)
    top = [key for key, _ in sorted(overall.items(), key=lambda item: (-item[1], item[0]))[:shown]]
    order = {key: i for i, key in enumerate(top)}
    out = []
    for rank, found in sorted(mine.items()):
        listed = sorted((r for r in found if (r.name, r.core_type) in order),
                        key=lambda r: order[r.name, r.core_type])
        rest = [r for r in found if (r.name, r.core_type) not in order]
        out.append(RankOpTypes(rank, sum(r.total_ns for r in found), listed, len(rest),
                               sum(r.count for r in rest), sum(r.total_ns for r in rest)))
    return top, out


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
            "span_ms": ms(span[1] - span[0]) if span else None,
            "wall_clock": report.wall_clock,
            "aligned": report.aligned,
            "input_bytes": report.input_bytes,
            "selection": report.selection,
        },
        "thresholds": {name: value for name, value, _ in report.thresholds.items()},
        "verdict": report.verdict(),
        "steps": [_step_record(f, by_step.get((f.rank, f.graph, f.step), [])) for f in report.steps],
        "outside_steps": [_step_record(f, [], judged=False) for f in report.outside],
        "diagnoses": [{"kind": d.kind, "rank": d.rank, "graph": d.graph, "step": d.step, "share": d.share,
                       "evidence": d.evidence, "summary": d.summary, "command": d.command}
                      for d in report.diagnoses],
        "slow_ranks": [{"rank": r.rank, "host": report.hosts.get(r.rank), "steps": r.steps,
                        "wait_caused_ms": ms(r.wait_caused_ns), "wait_suffered_ms": ms(r.wait_suffered_ns),
                        "last_arrivals": r.last_arrivals, "mean_step_ms": ms(r.mean_step_ns),
                        "mean_computing_ms": ms(r.mean_computing_ns),
                        "mean_communication_ms": ms(r.mean_communication_ns)} for r in report.slow_ranks],
        "spread": [{"graph": s.graph, "step": s.step, "ranks": s.ranks, "fastest_ms": ms(s.min_ns),
                    "slowest_ms": ms(s.max_ns), "slowest_rank": s.slowest_rank} for s in report.spread],
        "wait_matrix": [{"rank": rank, "waited_for": [{"rank": other, "wait_ms": ms(ns)}
                                                      for other, ns in row.items()]}
                        for rank, row in report.wait_matrix.items()],
        "collectives": {
            "matched": report.collectives,
            "slowest": [{"group": c.group, "step": c.step, "name": c.name, "occurrence": c.occurrence,
                         "ranks": c.ranks, "skew_ms": ms(c.skew_ns), "last_rank": c.last_rank,
                         "total_wait_ms": ms(c.total_wait_ns)} for c in report.slowest_collectives],
        },
        "top_ops": {
            "compute_ms": ms(report.compute_ns),
            "all": [_op_record(o, report.compute_ns) for o in report.top_ops],
            "by_rank": [{"rank": rank, "compute_ms": ms(report.compute_ns_by_rank.get(rank, 0)),
                         "ops": [_op_record(o, report.compute_ns_by_rank.get(rank, 0)) for o in ops]}
                        for rank, ops in sorted(report.top_ops_by_rank.items())],
        },
        "op_types": {
            "shown": [{"type": name, "core_type": core} for name, core in report.op_types_shown],
            "by_rank": [{"rank": r.rank, "total_ms": ms(r.total_ns),
                         "types": [{"type": o.name, "core_type": o.core_type, "count": o.count,
                                    "total_ms": ms(o.total_ns), "share": _share(o.total_ns, r.total_ns)}
                                   for o in r.shown],
                         "other": {"types": r.other_types, "count": r.other_count, "total_ms": ms(r.other_ns),
                                   "share": _share(r.other_ns, r.total_ns)}}
                        for r in report.op_types],
        },
        "clocks": [{"host": c.host, "ranks": list(c.ranks), "offset_us": c.offset_ns / 1000,
                    "spread_us": c.spread_ns / 1000, "collectives": c.instances} for c in report.clocks],
        "links": _links_record(report.links),
        "warnings": report.warnings,
        "critical": critical_json(report.critical),
        **({"data_preparation": prepared} if (prepared := data_json(report.steps)) else {}),
    } | ({"memory": [memory_record(row) for row in report.memory]} if report.memory else {}) | (
        {"pipeline": pipeline_json(report.pipeline)} if report.pipeline is not None else {}) | (
        {"baseline": baseline_json(report.baseline)} if report.baseline is not None else {})


def _links_record(links: MatrixReport | None) -> dict[str, Any]:
    """The job's links, slowest against their transport's median first (``comm_matrix``);
    ``plane_tasks`` null: no communication ops, so none looked for."""
    ranked = [] if links is None else links.slowest
    found = {"plane_tasks": None if links is None else links.plane_tasks,
             "ranked": [{"src_rank": s.src, "dst_rank": s.dst, "transport": s.transport,
                         "size_mb": s.size_bytes / 1e6, "time_ms": ms(s.time_ns),
                         "bandwidth_gb_s": s.gb_per_s, "median_gb_s": s.median_gb_per_s,
                         "ratio_to_median": s.ratio} for s in ranked]}
    if links is not None and links.from_profiler:  # ranks without plane tasks: their profiler's matrix
        found["from_profiler"] = {str(rank): source for rank, source in links.from_profiler.items()}
    return found


def _step_record(f: StepFacts, found: list[Diagnosis], judged: bool = True) -> dict[str, Any]:
    """``judged``: False for activity outside the steps, which is shown, never judged: its
    dominant finding is unknown, not balanced."""
    o = f.overlap
    return {
        "rank": f.rank, "graph": f.graph, "step": f.step, "start_ns": f.start_ns, "step_ms": ms(f.step_ns),
        "host_start": f.host_start, "preparing_ms": ms(o.preparing_ns), "computing_ms": ms(o.computing_ns),
        "communication_ms": ms(o.communication_ns), "not_overlapped_ms": ms(o.not_overlapped_ns),
        "overlapped_ms": ms(o.overlapped_ns), "free_ms": ms(o.free_ns), "bubble_ms": ms(o.bubble_ns),
        "other_ms": ms(f.other_ns), "phases_ms": {name: ms(ns) for name, ns in sorted(f.phases.items())},
        "wait_suffered_ms": ms(f.wait_suffered_ns), "wait_caused_ms": ms(f.wait_caused_ns),
        "last_arrivals": f.last_arrivals, "diagnoses": [d.kind for d in found],
        "dominant": dominant_kind(found, f.has_device) if judged else "unknown",
    }


def _share(part: int, whole: int) -> float | None:
    """None where the whole is 0 (ops that took no measurable time): no share, not 0."""
    return round(part / whole, 4) if whole else None


def _op_record(o: OpTotal, base: int) -> dict[str, Any]:
    return {"name": o.name, "count": o.count, "total_ms": ms(o.total_ns), "mean_ms": ms(o.mean_ns),
            "share": round(o.total_ns / base, 4) if base else 0.0}

