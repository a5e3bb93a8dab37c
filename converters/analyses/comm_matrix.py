"""``trace2perfetto comm --matrix``: the link matrix of torch_npu's ``communication_matrix.json``
per rank, step, op and link (src rank -> dst rank), and the slowest links of the job
(docs/analysis.md "Communication matrix").

Three pure parts:

* per op, its transit per link from its HCCL plane tasks (``communication.op_links``: CANN's
  ``CommunicationMatrixParser``);
* per rank and step, ``summarize``: the ops of one type (what each does, ``model.comm_kind``:
  ``allreduce``) on one group (``hccl group 586``), link by link, as the profiler writes them: the
  op with the highest bandwidth on the link (``top1``), the one in the middle (``middle``: index
  n // 2 from the highest), the three lowest (``bottom1`` the lowest, ``bottom2``, ``bottom3``, as
  many as there are ops) and their sum (``total``: sizes and times added, bandwidth of the sums);
  collectives and point-to-point ops (``p2p``: send, receive) apart;
* over the job, ``slowest_links``: each link's ``total`` over every step and op type, its bandwidth
  against the median bandwidth of the links of the same transport, lowest ratio first.

A rank whose input has no plane tasks has the rows of the link matrix its profiler wrote, where
its reader finds one (``readers.links``: torch_npu's ``communication_matrix.json`` of a rank that
kept only ``kernel_details.csv`` or the analysis), as written (``MatrixReport.from_profiler`` says
which ranks, from which file); else no rows, never zeros (Kineto, msprof). ``MatrixReport.plane_tasks``
says whether any kept rank had plane tasks.
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .. import communication, readers
from ..errors import Diagnostics, InputError
from ..executor import LOCAL, Where
from ..model import POINT_TO_POINT, RankInfo, StepRecords, comm_kind
from ..profile import Kind, Options, Profile, read_profile
from ..select import format_ids

COLUMNS = ("Rank", "Step", "Group", "Op", "Src Rank", "Dst Rank", "Transport Type", "Transit Size(MB)",
           "Transit Time(ms)", "Bandwidth(GB/s)")
LABELS = ("top1", "middle", "bottom1", "bottom2", "bottom3", "total")
COLLECTIVE, P2P = "collective", "p2p"


@dataclass(frozen=True, slots=True)
class OpLinks:
    """One op of one rank and step with its transit per link."""

    name: str
    group: str
    op_type: str  # what it does (``model.comm_kind``): ``hcom_allReduce__586_0_1`` is ``allreduce``
    links: dict[tuple[int, int], communication.Link]

    @property
    def p2p(self) -> bool:
        return self.op_type in POINT_TO_POINT


@dataclass(frozen=True, slots=True)
class LinkRow:
    """One row of the matrix: one link of one op (``allreduce-top1``) of one group, rank and step.
    ``source_op``: the op whose figures these are (None for ``total``, a sum)."""

    rank: int
    graph: int | None
    step: int | None
    kind: str  # "collective" or "p2p"
    group: str
    op: str
    src: int
    dst: int
    transport: str
    size_bytes: int
    time_ns: int
    source_op: str | None
    stated_gb_per_s: float | None = None  # the bandwidth a profiler's own matrix writes (else computed)

    @property
    def gb_per_s(self) -> float:
        if self.stated_gb_per_s is not None:
            return self.stated_gb_per_s
        return communication.Link(self.transport, self.size_bytes, self.time_ns).gb_per_s


@dataclass(frozen=True, slots=True)
class SlowLink:
    """One link over the job (every kept step and op): its transit, bandwidth, and its bandwidth
    against the median of the links of the same transport (``ratio``: 1 the median, lower slower)."""

    src: int
    dst: int
    transport: str
    size_bytes: int
    time_ns: int
    gb_per_s: float
    median_gb_per_s: float
    ratio: float | None  # None: the median is 0


@dataclass
class MatrixReport:
    rows: list[LinkRow]
    slowest: list[SlowLink] = field(default_factory=list)  # every link, slowest (lowest ratio) first
    plane_tasks: bool = False  # whether any kept rank had plane tasks on links
    from_profiler: dict[int, str] = field(default_factory=dict)  # rank -> the profiler's file its rows are

    @property
    def has_links(self) -> bool:
        """Whether any kept rank has rows: from its plane tasks or its profiler's own matrix."""
        return self.plane_tasks or bool(self.from_profiler)


def comm_matrix_report(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    step_marker: str | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
    each: Callable[[list[LinkRow]], None] | None = None,
) -> MatrixReport:
    """The link matrix of every kept rank and step, and the job's links, slowest first.
    ``each``: each rank's rows are handed to it, in rank order, and not kept (the rows grow with
    ranks x steps: a table of any size streams in flat memory); the slowest links all the same.

    Example::

        report = comm_matrix_report("profiler_output/")
        worst = report.slowest[0]   # e.g. SlowLink(src=3, dst=5, transport="HCCS", ..., ratio=0.62)

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under ``path``.
        InputError: an input file broken beyond recovery.
    """
    options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=Kind.DETAIL,  # detail: the plane tasks
                      step_marker=step_marker)
    profile = Profile.open(path, options, where=where, diag=diag)
    report = MatrixReport([])
    sums: dict[tuple[int, int, str], list[int]] = defaultdict(lambda: [0, 0])

    def collect(index: int, result: tuple[list[LinkRow], bool, str | None]) -> None:
        found, planes, source = result
        report.plane_tasks |= planes
        if source is not None:
            report.from_profiler[profile.ranks[index].rank] = source
        add_totals(sums, found)
        (each or report.rows.extend)(found)

    profile.map(rank_matrix, each=collect, ordered=True)
    profile.check_steps()
    report.slowest = ranked(sums)
    warn_unprofiled_peers(profile.diag, report.slowest, profile.ranks)
    return report


def warn_unprofiled_peers(diag: Diagnostics, links: Iterable[SlowLink], infos: Iterable[RankInfo]) -> None:
    """Say where the job's groups are larger than the ranks profiled (two ranks of an 8-rank job):
    the groups the ranks name (``RankInfo.groups``, global ranks) hold ranks the input does not, or
    the links reach more ranks than it holds (their ends may be ranks within a communicator, as
    MindSpore 1.x numbers them: counted, not named). Each link to a rank not profiled is seen from
    its profiled end only, and that rank is in no other figure."""
    infos = list(infos)
    kept = {info.rank for info in infos}
    named = sorted({rank for info in infos for members in info.groups.values() for rank in members} - kept)
    ends = {end for link in links for end in (link.src, link.dst)}
    if named:
        found = f"the communication groups hold rank {format_ids(named)}, which this input does not"
    elif len(ends) > len(kept):
        found = f"the links reach {len(ends)} ranks"
    else:
        return
    diag.warn("unprofiled_peers", f"{found} (it holds {len(kept)}: rank {format_ids(kept)}): the groups are "
              "larger than the ranks profiled; a link to the others is seen from its profiled end only")


def rank_matrix(info: RankInfo, options: Options, diag: Diagnostics
                ) -> tuple[list[LinkRow], bool, str | None]:
    """One rank's rows, step by step, whether it had plane tasks on links, and where it had none,
    the file of its profiler's own matrix its rows are (``profiler_rows``). Runs in a worker."""
    rows: list[LinkRow] = []
    planes = False
    for batch in read_profile([info], options, diag):
        found, has_planes = step_links(batch)
        planes |= has_planes
        rows += found
    if planes:
        return rows, planes, None
    rows, source = profiler_rows(info, options, diag)
    return rows, False, source


def profiler_rows(info: RankInfo, options: Options, diag: Diagnostics) -> tuple[list[LinkRow], str | None]:
    """A rank's rows as the link matrix its profiler wrote gives them (``readers.links``), of the
    kept steps, and that file's name; none where there is none. Each group named as the plane tasks'
    rows name it (``readers.links``), the figures as written."""
    try:
        found = readers.links(info, diag)
        if found is None:
            return [], None
        source, links = found
        links = [link for link in links if options.steps is None or link.step in options.steps]
    except InputError as e:  # a broken matrix file costs the rank its links, not its other figures
        diag.warn("bad_analysis", f"{e}; rank {info.rank} has no links")
        return [], None
    rows = [LinkRow(info.rank, None, link.step, link.kind, link.group, link.op,
                    link.src, link.dst, link.transport, link.size_bytes, link.time_ns, link.source_op,
                    link.gb_per_s) for link in links]
    return rows, source if rows else None


def step_links(batch: StepRecords) -> tuple[list[LinkRow], bool]:
    """One rank's step: its rows, and whether it had plane tasks on links."""
    ops = [OpLinks(op.name, communication.group_of(op), comm_kind(op), communication.op_links(op, tasks))
           for op, tasks in communication.op_tasks(batch)]
    return summarize(batch.rank, batch.graph, batch.step_id, ops), any(op.links for op in ops)


def summarize(rank: int, graph: int | None, step: int | None, ops: Iterable[OpLinks]) -> list[LinkRow]:
    """The rows of one rank's step: per kind, group and op type, per link, the ops picked by
    bandwidth (``LABELS``) and their total. Ops in time order: of equal bandwidths the earlier
    ranks higher."""
    by_type: dict[tuple[str, str, str], dict[tuple[int, int], list[tuple[str, communication.Link]]]] = {}
    for op in ops:
        key = (P2P if op.p2p else COLLECTIVE, op.group, op.op_type)
        links = by_type.setdefault(key, {})
        for link, figures in op.links.items():
            links.setdefault(link, []).append((op.name, figures))
    rows = []
    for (kind, group, op_type), links in by_type.items():
        for (src, dst), found in sorted(links.items()):
            for label, name, figures in picked(found):
                rows.append(LinkRow(rank, graph, step, kind, group, f"{op_type}-{label}", src, dst,
                                    figures.transport, figures.size_bytes, figures.time_ns, name))
    return rows


def picked(found: list[tuple[str, communication.Link]]) -> list[tuple[str, str | None, communication.Link]]:
    """(label, op name, figures) of the ops of one link as ``LABELS`` picks them, then the total
    (op name None; transport: the last op's, as CANN's sum keeps it)."""
    ranked = sorted(found, key=lambda item: -item[1].gb_per_s)  # stable: time order among equals
    n = len(ranked)
    out = [("top1", *ranked[0]), ("middle", *ranked[n // 2])]
    out += [(f"bottom{i}", *ranked[-i]) for i in range(1, min(3, n) + 1)]
    total = communication.Link(found[-1][1].transport, sum(f.size_bytes for _, f in found),
                      sum(f.time_ns for _, f in found))
    return [*out, ("total", None, total)]


def slowest_links(rows: Iterable[LinkRow]) -> list[SlowLink]:
    """Every link over the job (its ``total`` rows added up), slowest against the median of its
    transport first (then by src and dst)."""
    sums: dict[tuple[int, int, str], list[int]] = defaultdict(lambda: [0, 0])
    add_totals(sums, rows)
    return ranked(sums)


def add_totals(sums: dict[tuple[int, int, str], list[int]], rows: Iterable[LinkRow]) -> None:
    """``rows``' ``total`` figures added to ``sums``: (src, dst, transport) -> [bytes, ns]."""
    for row in rows:
        if row.op.endswith("-total"):
            entry = sums[row.src, row.dst, row.transport]
            entry[0] += row.size_bytes
            entry[1] += row.time_ns


def ranked(sums: dict[tuple[int, int, str], list[int]]) -> list[SlowLink]:
    """The links of ``sums`` (``add_totals``), slowest against the median of its transport first."""
    bandwidth = {key: communication.Link(key[2], size, ns).gb_per_s for key, (size, ns) in sums.items()}
    by_transport: dict[str, list[float]] = defaultdict(list)
    for (_, _, transport), gb in bandwidth.items():
        by_transport[transport].append(gb)
    medians = {transport: statistics.median(values) for transport, values in by_transport.items()}
    out = []
    for key, (size, ns) in sums.items():
        median = medians[key[2]]
        ratio = round(bandwidth[key] / median, 4) if median else None
        out.append(SlowLink(*key, size, ns, bandwidth[key], median, ratio))
    return sorted(out, key=lambda s: (s.ratio is None, s.ratio or 0.0, s.src, s.dst))


def record(row: LinkRow) -> dict:
    """A row as the CSV, table and JSON show it (MB = 10^6 bytes, as the profiler's)."""
    return dict(zip(COLUMNS, (row.rank, row.step, row.group, row.op, row.src, row.dst, row.transport,
                              row.size_bytes / 1e6, row.time_ns / 1e6, row.gb_per_s), strict=True))


def json_record(row: LinkRow) -> dict:
    """``record`` and what the JSON adds: the graph, collective or p2p, the op the figures are of."""
    return {**record(row), "Graph": row.graph, "Kind": row.kind, "Source Op": row.source_op}


def slow_record(link: SlowLink) -> dict:
    return {"Src Rank": link.src, "Dst Rank": link.dst, "Transport Type": link.transport,
            "Transit Size(MB)": link.size_bytes / 1e6, "Transit Time(ms)": link.time_ns / 1e6,
            "Bandwidth(GB/s)": link.gb_per_s, "Median Bandwidth(GB/s)": link.median_gb_per_s,
            "Ratio To Median": link.ratio}
