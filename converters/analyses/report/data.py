"""The report's data: one summary read of every rank in worker processes (``rank_facts``: each
hands back its ``types.StepFacts`` and device op totals), the whole report from them
(``report_data``: a ``types.Report``) and its numbers as one JSON document (``report_json``)."""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import communication
from ...errors import Diagnostics, InputError, as_text
from ...executor import LOCAL, Where
from ...intervals import is_compute, total_ns
from ...model import MINDDATA, RECV, SEND, Layer, RankInfo
from ...output import inputs_of
from ...profile import Kind, Options, Profile, aligning, folded, input_bytes, read_profile
from ...readers import for_ops, reader
from ..comm import StepTime, last_arrivals, slow_ranks_of, spread_of, with_waits
from ..comm_matrix import MatrixReport
from ..memory import MemoryOverview, Overview, joined_overviews, memory_overview
from ..memory import record as memory_record
from ..ops import OpRow, RankOps, combine, names_types, rank_ops
from ..overlap import joined_rows, overlap_row, step_span
from .baseline import baseline_json, compare_with
from .critical import critical_json, detail_read
from .dataprep import data_json
from .diagnosis import diagnose, trace_command, verdict
from .pipelined import pipeline_json, pipeline_section
from .text import ms
from .types import (
    Diagnosis,
    OpTotal,
    RankOpTypes,
    Report,
    SlowCollective,
    StepFacts,
    Thresholds,
    dominant_kind,
)

SCHEMA = "trace2perfetto-report/1"
OPS_PER_RANK = 1000  # device op names a worker hands back per rank (by total time); the rest summed
OTHER_OPS = "(other ops)"
OP_TYPES_SHOWN = 8  # op types (and core types) drawn per rank: the most time over the kept ranks
WALL_TIME_SINCE_NS = 946_684_800 * 10**9  # 2000-01-01: earlier "epoch" times are a clock of its own


# -- one read of every rank -----------------------------------------------------------------------

@dataclass
class _RankResult:
    """What a worker hands back for one rank: small, whatever the input size."""

    steps: list[StepFacts]
    ops: dict[str, list[int]]  # name -> [count, total ns], at most OPS_PER_RANK + 1 names
    comm_ops: list[communication.OpComm]
    op_types: RankOps  # ``ops``' sums by op type
    memory: Overview | None = None  # its memory, where its reader met the records in this read


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
    hosts = communication.host_names(infos)  # a clock domain per rank: its host, else the rank alone
    facts = [f for r in results for f in r.steps]
    # Activity no step bounds (before the first step, after the last) is no step: where the job
    # marks steps it is shown apart and judged on no axis; where none does, it is the whole run.
    marked = any(f.step is not None for f in facts)
    outside = [f for f in facts if marked and f.step is None]
    facts = [f for f in facts if not (marked and f.step is None)]
    ops = {info.rank: r.comm_ops for info, r in zip(infos, results, strict=True)}
    instances = communication.match(ops)
    clocks = communication.clock_offsets(instances, hosts) if len(infos) > 1 else []
    policy = communication.timeline(infos, clocks, aligned)  # the one clock policy: offsets, ranks apart
    communication.say_timeline(diag, policy)
    if policy.offsets or policy.apart:
        instances = communication.matched(ops, policy)
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
    types = combine(r.op_types for r in results)
    report.op_types_shown, report.op_types = op_types_by_rank(types)
    if not names_types(types):
        diag.warn("no_op_types", "the input names no op type (torch_npu at profiler level 0 records none): "
                  "the operator types are its tasks' names")
    report.diagnoses = diagnose(facts, thresholds, lambda f: trace_command(report, f))
    overviews = [r.memory for r in results]
    if overviews and None not in overviews:  # every rank's memory met in the read above
        report.memory, report.memory_series = joined_overviews(infos, overviews)
    else:
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
    files (torch_npu's kernel_details.csv beside trace_view.json). Where its reader meets its memory
    records in the same read (a Kineto trace), its memory too (``memory.MemoryOverview``). Runs in a
    worker."""
    out: list[tuple[tuple[int, int | None] | None, StepFacts]] = []
    ops: dict[str, list[int]] = {}
    comm_ops: list[communication.OpComm] = []
    stream, step_layer, op_layer = Layer.STREAM, Layer.STEP, Layer.COMM_OP
    op_info, detail = for_ops(info)
    same_read = op_info == info  # the same files: one read (in detail where ops reads them so)
    op_types = RankOps(info.rank, "type")
    read = dataclasses.replace(options, kind=Kind.DETAIL) if same_read and detail else options
    # where the reader meets the rank's memory records in this read (Kineto's one file), they are
    # taken on the way: the trace is not read again for the report's memory
    memory = MemoryOverview(info) if (reader(info.format).memory_in_read and read.kind is Kind.SUMMARY
                                      and len(info.source_paths) == 1) else None
    for batch in read_profile([info], read, diag, memory):
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
        out.append((batch.part, StepFacts(batch.rank, batch.graph, batch.step_id, start, step_ns, host_start,
                                          row, {name: total_ns(spans) for name, spans in phases.items()},
                                          key=batch.key, data=data)))
        comm_ops += communication.light_ops(batch.rank, batch.graph, batch.step_id, batch.key, mine)
    if len(ops) > OPS_PER_RANK:
        ranked = sorted(ops.items(), key=lambda item: -item[1][1])
        ops = dict(ranked[:OPS_PER_RANK])
        rest = ranked[OPS_PER_RANK:]
        ops[OTHER_OPS] = [sum(c for _, (c, _) in rest), sum(t for _, (_, t) in rest)]
    try:
        overview = None if memory is None else memory.result(diag)
    except InputError:  # its host memory broken: the report's memory read says so
        overview = None
    return _RankResult(list(folded(out, _joined_facts)), ops, comm_ops,
                       op_types if same_read else rank_ops(info, options, diag, "type"), overview)


def _joined_facts(a: StepFacts, b: StepFacts) -> StepFacts:
    """Two parts of a pseudo step as one (``profile.folded``): from the first's start, their times
    and phases added up."""
    phases = dict(a.phases)
    for name, ns in b.phases.items():
        phases[name] = phases.get(name, 0) + ns
    return dataclasses.replace(a, step_ns=a.step_ns + b.step_ns, overlap=joined_rows(a.overlap, b.overlap),
                               phases=phases, data={**b.data, **a.data})


def _step_time(f: StepFacts) -> StepTime:
    return StepTime(f.rank, f.graph, f.step, f.step_ns, f.overlap.computing_ns, f.overlap.communication_ns,
                    key=f.key)


def _add_waits(facts: list[StepFacts], ops: list[communication.OpComm],
               instances: list[communication.Instance]) -> None:
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


def _wait_matrix(instances: list[communication.Instance]) -> dict[int, dict[int, int]]:
    """Waiting rank -> the rank it waited for (the last to arrive) -> total wait, ns."""
    matrix: dict[int, dict[int, int]] = defaultdict(dict)
    for inst in instances:
        last = inst.last_rank
        for rank in inst.starts:
            wait = inst.wait_ns(rank)
            if wait:
                matrix[rank][last] = matrix[rank].get(last, 0) + wait
    return {rank: dict(sorted(row.items())) for rank, row in sorted(matrix.items())}


def _slowest(instances: list[communication.Instance], n: int) -> list[SlowCollective]:
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
        "verdict": verdict(report),
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

