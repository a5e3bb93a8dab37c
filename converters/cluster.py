"""The whole job at once: ``trace2perfetto comm`` (communication per op and rank, collectives across
ranks, slow ranks, clocks). Each rank is read in a worker as for ``convert``; only its ops and a
few figures per step come back, and the matching across ranks happens here (``comm``)."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import comm
from .discover import discover
from .errors import Diagnostics
from .executor import LOCAL, Where, each_rank
from .model import RankInfo
from .pipeline import Kind, Options, _align, read_profile, step_overlap
from .select import check_graphs, select_ranks


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step of one rank: how long it took, its compute and communication, and the time it
    waited in collectives for slower ranks (suffered) and made faster ranks wait (caused)."""

    rank: int
    graph: int | None
    step: int | None
    step_ns: int
    computing_ns: int | None  # None: no device tasks recorded
    communication_ns: int
    wait_suffered_ns: int = 0
    wait_caused_ns: int = 0


@dataclass(frozen=True, slots=True)
class SlowRank:
    """One rank's row of the slow-rank table, over the kept steps (means per step)."""

    rank: int
    host: str
    steps: int
    wait_caused_ns: int
    wait_suffered_ns: int
    last_arrivals: int  # collectives in which it arrived last
    mean_step_ns: int
    mean_computing_ns: int | None
    mean_communication_ns: int


@dataclass(frozen=True, slots=True)
class StepSpread:
    """One step across ranks (whatever each numbers its graphs): the fastest and slowest step time."""

    step: int | None
    ranks: int
    min_ns: int
    max_ns: int
    slowest_rank: int


@dataclass
class CommReport:
    ops: list[comm.OpComm]
    instances: int  # collectives matched across two ranks or more
    clocks: list[comm.HostClock]
    aligned: bool
    steps: list[StepTime] = field(default_factory=list)
    slow_ranks: list[SlowRank] = field(default_factory=list)  # most wait caused first
    spread: list[StepSpread] = field(default_factory=list)


def comm_report(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    align: str | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> CommReport:
    """Communication of every op of every kept rank and step, matched across ranks.

    Per op: the figures of torch_npu's ``communication.json`` (``comm.op_comm``) and, where other
    ranks recorded the same collective, its arrival skew, last rank and this rank's wait for it.
    Per host: its clock offset as the collectives' ends show it (``comm.clock_offsets``); with
    ``align="collectives"`` the skews and waits are measured on the aligned clocks. ``where``: this
    machine or a Dask cluster (``executor.Where``).

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under ``path``, a bad ``align``.
        InputError: an input file broken beyond recovery.
    """
    aligning = _align(align)
    options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=Kind.DETAIL)  # detail: the plane tasks
    diag = Diagnostics() if diag is None else diag
    infos = select_ranks(discover(Path(path), diag), options.ranks)
    check_graphs(infos, options.graphs)
    ops: dict[int, list[comm.OpComm]] = {}
    times: dict[int, list[StepTime]] = {}

    def collect(index: int, result: tuple[list[comm.OpComm], list[StepTime], Diagnostics]) -> None:
        ops[infos[index].rank], times[infos[index].rank] = result[0], result[1]
        diag.merge(result[2])

    skipped = each_rank(_rank_comm, [(info, options) for info in infos], [info.rank for info in infos],
                        collect, where, diag)
    infos = [info for index, info in enumerate(infos) if index not in skipped]
    hosts = comm.host_names(infos)
    instances = comm.match(ops)
    clocks = comm.clock_offsets(instances, hosts)
    if aligning:
        instances = comm.match(ops, comm.rank_offsets(clocks))
    report = CommReport([op for info in infos for op in ops[info.rank]], len(instances), clocks, aligning)
    report.steps = with_waits([t for info in infos for t in times[info.rank]], report.ops)
    report.slow_ranks = slow_ranks_of(report.steps, instances, hosts)
    report.spread = spread_of(report.steps)
    return report


def _rank_comm(job: tuple[RankInfo, Options]) -> tuple[list[comm.OpComm], list[StepTime], Diagnostics]:
    """One rank's ops with their plane-task figures, and its step times. Runs in a worker process."""
    info, options = job
    diag = Diagnostics()
    ops, times = [], []
    for batch in read_profile([info], options, diag):
        ops.extend(comm.step_ops(batch))
        o = step_overlap(batch)
        busy = o.computing + o.communication
        span = (max(e for _, e in busy) - min(s for s, _ in busy)) if busy else 0
        step_ns = batch.step.end_ns - batch.step.start_ns if batch.step is not None else span
        times.append(StepTime(batch.rank, batch.graph, batch.step_id, step_ns,
                              o.computing_ns if batch.has_device else None, o.communication_ns))
    return ops, times, diag


def with_waits(times: list[StepTime], ops: list[comm.OpComm]) -> list[StepTime]:
    """Each step with the wait it suffered (its ranks' waits for the last rank) and caused (the
    others' waits in the collectives where it came last)."""
    last_op = {op.key: op for op in ops if op.key is not None and op.rank == op.last_rank}
    suffered: dict[tuple, int] = defaultdict(int)
    caused: dict[tuple, int] = defaultdict(int)
    for op in ops:
        if op.wait_for_last_ns:
            suffered[op.rank, op.graph, op.step] += op.wait_for_last_ns
            last = last_op[op.key]
            caused[last.rank, last.graph, last.step] += op.wait_for_last_ns
    return [StepTime(t.rank, t.graph, t.step, t.step_ns, t.computing_ns, t.communication_ns,
                     suffered[t.rank, t.graph, t.step], caused[t.rank, t.graph, t.step]) for t in times]


def slow_ranks_of(times: list[StepTime], instances: list[comm.Instance],
                hosts: dict[int, str]) -> list[SlowRank]:
    last: dict[int, int] = defaultdict(int)
    for inst in instances:
        if inst.skew_ns:
            last[inst.last_rank] += 1
    by_rank: dict[int, list[StepTime]] = defaultdict(list)
    for t in times:
        by_rank[t.rank].append(t)
    rows = []
    for rank, mine in by_rank.items():
        n = len(mine)
        computing = [t.computing_ns for t in mine if t.computing_ns is not None]
        rows.append(SlowRank(
            rank, hosts[rank], n, sum(t.wait_caused_ns for t in mine), sum(t.wait_suffered_ns for t in mine),
            last[rank], sum(t.step_ns for t in mine) // n,
            sum(computing) // len(computing) if computing else None,
            sum(t.communication_ns for t in mine) // n,
        ))
    return sorted(rows, key=lambda r: (-r.wait_caused_ns, -r.mean_step_ns, r.rank))


def spread_of(times: list[StepTime]) -> list[StepSpread]:
    by_step: dict[int | None, list[StepTime]] = defaultdict(list)
    for t in times:
        by_step[t.step].append(t)
    out = []
    for step, mine in by_step.items():
        slowest = max(mine, key=lambda t: (t.step_ns, -t.rank))
        fastest = min(t.step_ns for t in mine)
        out.append(StepSpread(step, len({t.rank for t in mine}), fastest, slowest.step_ns, slowest.rank))
    return out
