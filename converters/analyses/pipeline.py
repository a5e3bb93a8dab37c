"""``trace2perfetto pipeline``: the pipeline-parallel schedule as it ran (docs/analysis.md §10).

Per step and stage (a rank), each micro-batch's forward and backward (its compute: start, end,
time), the schedule it shows (GPipe, 1F1B or "unknown" with the order seen), the stage's bubble
beside the schedule's ideal, and each send and receive split into its wait for the peer and its
transfer. Found without user instrumentation: from the framework's own micro-batch ranges where
the trace holds them (``readers.pipelining.phase``), else from the order of the point-to-point ops
and their peers. Only host records are read: on a CPU job the stages' compute is host work; on a
GPU or NPU job it is the host's time in the micro-batch (its launches), which a warning says.

Two parts, as every analysis: ``rank_pipeline`` reads one rank in a worker and returns small
``StagePart``s; ``pipeline_report`` orders the stages and matches the sends with the receives
across ranks (the k-th send from a to b with the k-th receive on b from a, in a step).
"""

from __future__ import annotations

import bisect
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import intervals
from ..errors import Diagnostics
from ..executor import LOCAL, Where
from ..model import RECV, SEND, Layer, RankInfo, Slice, StepKey, StepRecords, comm_kind
from ..profile import Kind, Options, Profile, TooLarge, read_profile, whole_steps
from ..readers.pipelining import (
    BACKWARD,
    BACKWARD_PASS,
    FORWARD,
    INPUT_SPLIT,
    LOSS,
    RELEASE,
    SEND_PREPARATION,
    peer,
    phase,
    role,
)
from .overlap import step_span

BY = ("stage", "microbatch", "p2p")
GPIPE, ONE_F_ONE_B, UNKNOWN = "GPipe", "1F1B", "unknown"
RANGES, P2P = "ranges", "p2p"  # how a stage's micro-batches were found


@dataclass(slots=True)
class Transfer:
    """One send or receive: the op and the work it started (records of the same kind that begin
    inside one another are one transfer). ``call_end_ns``: where its first record (the call)
    ends, the point past which a sender goes on computing. ``wait_ns`` + ``transfer_ns`` =
    its duration once matched with the peer's op (None: no match)."""

    kind: str  # SEND or RECV
    peer: int | None
    start_ns: int
    end_ns: int
    call_end_ns: int
    index: int = 0  # the k-th transfer of its kind with its peer in the step
    wait_ns: int | None = None
    transfer_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Phase:
    """One micro-batch's forward (``F``) or backward (``B``) on a stage: its compute, between the
    receive that feeds it and the send that passes it on. None: a bound the records cannot give."""

    kind: str
    microbatch: int
    start_ns: int | None
    end_ns: int | None

    @property
    def compute_ns(self) -> int | None:
        return None if self.start_ns is None or self.end_ns is None else self.end_ns - self.start_ns

    @property
    def label(self) -> str:
        return f"{self.kind}{self.microbatch}"


@dataclass(slots=True)
class StagePart:
    """One step of one rank, as its worker reads it."""

    rank: int
    key: StepKey | None
    step: int | None
    graph: int | None
    start_ns: int
    step_ns: int
    found_by: str
    phases: list[Phase] = field(default_factory=list)
    transfers: list[Transfer] = field(default_factory=list)
    compute_ns: int | None = None  # the union of its phases' compute (None: a bound unknown)
    stage: int | None = None  # its place in the pipeline, from the driver
    stages: int | None = None
    schedule: str = UNKNOWN


@dataclass
class PipelineReport:
    parts: list[StagePart]

    @property
    def transfers(self) -> list[tuple[StagePart, Transfer]]:
        return [(part, t) for part in self.parts for t in part.transfers]


# -- one rank -------------------------------------------------------------------------------------

def rank_pipeline(info: RankInfo, options: Options, diag: Diagnostics) -> list[StagePart]:
    """One rank's steps: their transfers and micro-batches. Runs in a worker process."""
    parts, device = [], False
    for batch in whole_steps(read_profile([info], options, diag)):
        if type(batch) is TooLarge:
            diag.warn("too_large", f"{batch.why}: its pipeline schedule is unknown")
            continue
        device = device or any(s.layer is Layer.STREAM for s in batch.slices)
        part = stage_part(batch)
        if part.transfers or part.phases:
            parts.append(part)
    if device and parts:
        diag.warn("pipeline_host_time", f"rank {info.rank}: the pipeline's compute is the host's time in "
                  "each micro-batch (its launches); the device's execution is not split from it",
                  f"rank {info.rank}")
    return parts


def stage_part(batch: StepRecords) -> StagePart:
    """One step of one rank: its transfers, and its micro-batches from the framework's ranges
    where it wrote them, else from the order of its transfers."""
    start, dur, _ = step_span(batch)
    transfers = transfers_of(batch.slices)
    ranges = sorted(((s, found) for s in batch.slices if s.layer is Layer.HOST
                     and (found := phase(s)) is not None), key=lambda pair: pair[0].start_ns)
    if ranges:
        phases = [_within(s, kind, mb, transfers) for s, (kind, mb) in ranges]
        found_by = RANGES
    else:
        phases, found_by = _from_transfers(transfers, start, start + dur), P2P
    if phases:
        work = HostWork(batch.slices, (s for s, _ in ranges))
        phases = work.split([work.tighten(p) for p in phases])
    part = StagePart(batch.rank, batch.key, batch.step_id, batch.graph, start, dur, found_by, phases,
                     transfers)
    part.compute_ns = _union(phases)
    return part


def transfers_of(slices: Iterable[Slice]) -> list[Transfer]:
    """The step's sends and receives in time order. A record of the same kind that begins inside
    a transfer's call, or, saying no peer, is the next record after a call that says one, is the
    work that call started (an op and its library's range), not another transfer."""
    out: list[Transfer] = []
    ops = sorted((s for s in slices if s.layer is Layer.COMM_OP and comm_kind(s) in (SEND, RECV)),
                 key=lambda s: (s.start_ns, -s.dur_ns))
    alone: Transfer | None = None  # the last transfer, while it is one call only
    for s in ops:
        kind, whom = comm_kind(s), peer(s)
        held = out[-1] if out and out[-1].kind == kind else None
        if held is not None and (s.start_ns <= held.call_end_ns or (
                held is alone and whom is None and held.peer is not None)):
            held.end_ns = max(held.end_ns, s.end_ns)
            held.peer = held.peer if held.peer is not None else whom
            alone = None
            continue
        out.append(Transfer(kind, whom, s.start_ns, s.end_ns, s.end_ns))
        alone = out[-1]
    seen: dict[tuple, int] = defaultdict(int)
    for t in out:
        t.index = seen[t.kind, t.peer]
        seen[t.kind, t.peer] += 1
    return out


def _within(s: Slice, kind: str, mb: int, transfers: list[Transfer]) -> Phase:
    """A micro-batch's window inside its framework range: after the receives that begin in it
    (they feed it), up to the first send that begins after that (it passes the result on)."""
    inside = [t for t in transfers if s.start_ns <= t.start_ns < s.end_ns]
    start = max([s.start_ns] + [min(t.end_ns, s.end_ns) for t in inside if t.kind == RECV])
    end = min([s.end_ns] + [t.start_ns for t in inside if t.kind == SEND and t.start_ns >= start])
    return Phase(kind, mb, start, end)


class HostWork:
    """A step's host records by start, to find the work inside a window: its compute is from the
    first record that begins in it to the last that ends in it, so time the host spent in no
    record (descheduled, in the interpreter between two ops) at its edges is not counted. What a
    record does where the readers know it (``readers.pipelining.role``) bounds a phase closer: a
    backward ends with its last backward pass or release record (not the optimizer after a
    stage's last backward, in a window up to the step's end), a forward after the input's split
    into micro-batches and before the loss and the send's preparation (none of them a phase's,
    as the schedules' own ranges have it);
    and where a forward and a backward share a window, they part there (``split``)."""

    def __init__(self, slices: Iterable[Slice], ranges: Iterable[Slice]) -> None:
        skip = {id(r) for r in ranges}
        self.work = sorted((s.start_ns, s.end_ns, role(s)) for s in slices
                           if s.layer is Layer.HOST and id(s) not in skip and s.dur_ns > 0)
        self.starts = [start for start, _, _ in self.work]

    def inside(self, lo: int, hi: int) -> list[tuple[int, int, str | None]]:
        """The records that begin at ``lo`` or later and end by ``hi``, by start."""
        found = self.work[bisect.bisect_left(self.starts, lo):bisect.bisect_right(self.starts, hi)]
        return [r for r in found if r[1] <= hi]

    def tighten(self, p: Phase) -> Phase:
        """``p`` narrowed to its work inside its window (as it is where it holds none)."""
        if p.start_ns is None or p.end_ns is None:
            return p
        inside = self.inside(p.start_ns, p.end_ns)
        if not inside:
            return p
        start, end = inside[0][0], max(end for _, end, _ in inside)
        if p.kind == FORWARD:
            split = max((end for _, end, what in inside if what == INPUT_SPLIT), default=start)
            start = min((begin for begin, _, _ in inside if begin >= split), default=start)
            end = max((end for _, end, what in inside if what not in _NOT_FORWARD), default=end)
        else:
            end = max((end for _, end, what in inside if what in _BACKWARD_ENDS), default=end)
        return Phase(p.kind, p.microbatch, start, end)

    def split(self, phases: list[Phase]) -> list[Phase]:
        """Two phases that share a window (``_unshared``; ``tighten`` leaves them) parted, each
        then narrowed to its work: a forward, then a backward (the last stage), where the loss
        begins (else the backward pass) and the backward after the loss; a backward, then a
        forward (1F1B's first stage), after the backward's last record. Left as they are where
        the window holds no backward pass."""
        out = list(phases)
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if a.end_ns is not None or b.start_ns is not None or None in (a.start_ns, b.end_ns) \
                    or a.kind == b.kind:
                continue
            inside = self.inside(a.start_ns, b.end_ns)
            passes = [(start, end) for start, end, what in inside if what == BACKWARD_PASS]
            if not passes:
                continue
            if a.kind == FORWARD:
                loss = [(start, end) for start, end, what in inside if what == LOSS and start < passes[0][0]]
                cut, resume = (loss[0][0], max(end for _, end in loss)) if loss else (passes[0][0],) * 2
            else:
                cut = resume = max(end for _, end, what in inside if what in _BACKWARD_ENDS)
            out[i] = self.tighten(Phase(a.kind, a.microbatch, a.start_ns, cut))
            out[i + 1] = self.tighten(Phase(b.kind, b.microbatch, resume, b.end_ns))
        return out


_BACKWARD_ENDS = (BACKWARD_PASS, RELEASE)  # the records a backward ends with
_NOT_FORWARD = (BACKWARD_PASS, RELEASE, LOSS, SEND_PREPARATION)  # those a forward never ends with


def _from_transfers(transfers: list[Transfer], step_start: int, step_end: int) -> list[Phase]:
    """Micro-batches from the point-to-point pattern alone: a stage receives its forward input
    from the previous stage (the peer of its first receive, where that comes before any send) and
    sends its result to the next; the backward runs the other way. The k-th forward lies between
    the k-th receive from the previous stage and the k-th send to the next; a side with no
    transfer (the first stage's forward start, the last stage's forward end) is bounded by the
    nearest transfer around it, or the step's edge where none is; where two phases meet with no
    transfer between, the bound each took from the other's side is unknown (``HostWork.split``)."""
    if not transfers:
        return []
    prev = transfers[0].peer if transfers[0].kind == RECV else None
    nexts = {t.peer for t in transfers if t.kind == SEND and t.peer != prev}
    nxt = next(iter(nexts)) if len(nexts) == 1 else None
    feeds = {FORWARD: (prev, nxt), BACKWARD: (nxt, prev)}
    phases = []
    for kind, (source, sink) in feeds.items():
        gets = [t for t in transfers if t.kind == RECV and t.peer == source and source is not None]
        puts = [t for t in transfers if t.kind == SEND and t.peer == sink and sink is not None]
        for mb in range(max(len(gets), len(puts))):
            got = gets[mb] if mb < len(gets) else None
            put = puts[mb] if mb < len(puts) else None
            if got is None and put is None:
                continue
            start = got.end_ns if got else _boundary_before(transfers, put.start_ns, step_start)
            end = put.start_ns if put else _boundary_after(transfers, got.end_ns, step_end)
            # two phases in one window: the one its receive opens runs first, the one whose send
            # closes it last (1F1B's first stage: a backward, then a forward; its last: the reverse)
            phases.append(((start if start is not None else end, got is None), Phase(kind, mb, start, end)))
    phases.sort(key=lambda pair: pair[0])
    return _unshared([phase for _, phase in phases])


def _boundary_before(transfers: list[Transfer], at: int, step_start: int) -> int:
    """Where the stage last stopped communicating before ``at``: a receive's end, a send's call;
    the step's start where it did not."""
    ends = [t.end_ns if t.kind == RECV else t.call_end_ns for t in transfers if t.start_ns < at]
    return max([step_start] + [e for e in ends if e <= at])


def _boundary_after(transfers: list[Transfer], at: int, step_end: int) -> int:
    return min([step_end] + [t.start_ns for t in transfers if t.start_ns >= at])


def _unshared(phases: list[Phase]) -> list[Phase]:
    """Phases whose inferred windows overlap meet with no transfer between them: the bound each
    took from the other's side is unknown."""
    out = list(phases)
    for i in range(len(out) - 1):
        a, b = out[i], out[i + 1]
        if None not in (a.end_ns, b.start_ns) and a.end_ns > b.start_ns:
            out[i], out[i + 1] = Phase(a.kind, a.microbatch, a.start_ns, None), \
                Phase(b.kind, b.microbatch, None, b.end_ns)
    return out


def _union(phases: list[Phase]) -> int | None:
    """The time the stage computed: the union of its phases' windows; two phases that meet with
    no transfer between (``_unshared``) count as the one window they share. None where a bound
    is unknown otherwise."""
    spans, i = [], 0
    while i < len(phases):
        p = phases[i]
        if p.compute_ns is not None:
            spans.append((p.start_ns, p.end_ns))
        elif p.start_ns is not None and i + 1 < len(phases) and phases[i + 1].start_ns is None \
                and phases[i + 1].end_ns is not None:
            spans.append((p.start_ns, phases[i + 1].end_ns))
            i += 1
        else:
            return None
        i += 1
    return intervals.total_ns(intervals.union(spans)) if spans else None


# -- drawn ----------------------------------------------------------------------------------------

PIPELINE_LANE = "Pipeline"  # with the converter's own lanes, in each rank's Overlap Analysis group


BUBBLE = "bubble"


def pipeline_slices(batch: StepRecords) -> list[Slice]:
    """One step of one rank drawn on its *Pipeline* lane: a slice per micro-batch phase whose
    compute the records bound (``F3``, ``B3``) and, where every phase's are known, the bubble
    between them (``bubble``: they add up to the step's time minus its compute); nothing where
    the step sends and receives nothing (every job that is no pipeline: its trace as it was).
    Each send's arrow runs from the phase it carries to the phase its receive feeds (``arrows``)."""
    if not any(s.layer is Layer.COMM_OP and comm_kind(s) in (SEND, RECV) for s in batch.slices):
        return []
    part = stage_part(batch)
    known = [p for p in part.phases if p.compute_ns is not None]
    flows_out, flows_in = arrows(part)
    out = [Slice(batch.rank, Layer.OVERLAP, PIPELINE_LANE, p.label, p.start_ns, p.compute_ns,
                 {"Phase": "forward" if p.kind == FORWARD else "backward", "Micro-batch": p.microbatch,
                  "Found by": part.found_by}, "", flows_out.get(p.label, ()), flows_in.get(p.label, ()))
           for p in known]
    if known and len(known) == len(part.phases):
        edges = [part.start_ns, *(t for p in sorted(known, key=lambda p: p.start_ns)
                                  for t in (p.start_ns, p.end_ns)), part.start_ns + part.step_ns]
        out.extend(Slice(batch.rank, Layer.OVERLAP, PIPELINE_LANE, BUBBLE, a, b - a)
                   for a, b in zip(edges[::2], edges[1::2], strict=True) if b > a)
    return out


def carried(part: StagePart) -> list[tuple[Transfer, str]]:
    """Each transfer with the phase it carries (a send) or feeds (a receive): the k-th send to the
    next stage is forward k's result, the k-th to the previous backward k's gradient; a receive
    from the previous stage feeds a forward, one from the next a backward. The previous stage is
    the peer of the step's first transfer where that is a receive (as ``_from_transfers``)."""
    prev = part.transfers[0].peer if part.transfers and part.transfers[0].kind == RECV else None
    out = []
    for t in part.transfers:
        if t.peer is not None:
            forward = (t.peer != prev) if t.kind == SEND else (t.peer == prev)
            out.append((t, f"{FORWARD if forward else BACKWARD}{t.index}"))
    return out


def arrows(part: StagePart) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """The arrows a stage's phases start (its sends) and end (its receives), by phase label. Each
    side names the arrow alike without the other (the step, sender, receiver and the k-th transfer
    between them), so the ranks' workers draw both ends apart. From phase to phase, not from op
    to op: the trace processor links an arrow's ends in time order, and a receive often begins
    before its send (it waits), while the phase it feeds begins after the data arrived."""
    out: dict[str, tuple[int, ...]] = defaultdict(tuple)
    into: dict[str, tuple[int, ...]] = defaultdict(tuple)
    for t, label in carried(part):
        sender, receiver = (part.rank, t.peer) if t.kind == SEND else (t.peer, part.rank)
        ends = out if t.kind == SEND else into
        ends[label] += (arrow_id(part.key, sender, receiver, t.index),)
    return out, into


def arrow_id(key: StepKey | None, sender: int, receiver: int, index: int) -> int:
    """The arrow of the ``index``-th transfer from ``sender`` to ``receiver`` in the step."""
    from hashlib import blake2b  # as comm.flow_id: a command that draws no arrows loads no OpenSSL

    text = f"p2p|{None if key is None else key.text}|{sender}|{receiver}|{index}"
    return int.from_bytes(blake2b(text.encode(), digest_size=8).digest(), "little")


# -- across ranks ---------------------------------------------------------------------------------

def pipeline_report(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    step_marker: str | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> PipelineReport:
    """The pipeline of every kept rank and step: stages ordered, schedules named, sends matched
    with receives. ``step_marker``: the user's range that is the step (``--step-marker``).

    Raises:
        UsageError: unknown ranks or graphs, nothing recognisable under ``path``.
        InputError: an input file broken beyond recovery.
    """
    options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=Kind.DETAIL,  # detail: host ranges
                      step_marker=step_marker)
    profile = Profile.open(path, options, where=where, diag=diag)
    found: list[list[StagePart]] = profile.map(rank_pipeline)
    profile.check_steps()
    parts = [part for rank_parts in found for part in rank_parts]
    if not parts:
        profile.diag.warn("no_pipeline", f"{path}: no point-to-point ops nor micro-batch ranges in the kept "
                          "ranks and steps: no pipeline to show", str(path))
    by_step: dict[StepKey | None, list[StagePart]] = defaultdict(list)
    for part in parts:
        by_step[part.key].append(part)
    for step_parts in by_step.values():
        _order_stages(step_parts)
        match(step_parts)
    parts.sort(key=lambda p: (p.key is None, p.key or (), p.stage is None, p.stage or 0, p.rank))
    return PipelineReport(parts)


def _order_stages(parts: list[StagePart]) -> None:
    """Each rank's place in its pipeline: a rank whose first transfer is a receive is fed by that
    peer; chains from the ranks fed by none. Then the pipeline's schedule, from its stages' orders."""
    by_rank = {p.rank: p for p in parts}
    fed_by = {p.rank: (p.transfers[0].peer if p.transfers and p.transfers[0].kind == RECV else None)
              for p in parts}
    feeds = {src: rank for rank, src in fed_by.items() if src is not None}
    for first in sorted(r for r, src in fed_by.items() if src is None):
        chain = [first]
        while feeds.get(chain[-1]) in by_rank and feeds[chain[-1]] not in chain:
            chain.append(feeds[chain[-1]])
        schedule = schedule_of([[p.label for p in by_rank[rank].phases] for rank in chain])
        for stage, rank in enumerate(chain):
            by_rank[rank].stage, by_rank[rank].stages, by_rank[rank].schedule = stage, len(chain), schedule


def schedule_of(orders: list[list[str]]) -> str:
    """The schedule a pipeline's stages show, from each one's order of phases (stage by stage):
    GPipe (every forward, then every backward, on every stage), 1F1B (forwards and backwards
    alternate once the pipeline is full: at most ``p - stage`` micro-batches in flight on each
    stage, and not GPipe on all: a first stage with as few micro-batches as stages runs both
    alike), else unknown."""
    if not orders or not all(_in_order(order) for order in orders):
        return UNKNOWN
    if all(_all_forwards_first(order) for order in orders):
        return GPIPE
    stages = len(orders)
    return ONE_F_ONE_B if all(_in_flight(order) <= stages - s for s, order in enumerate(orders)) else UNKNOWN


def _in_order(order: list[str]) -> bool:
    fwd = [int(x[1:]) for x in order if x[0] == FORWARD]
    bwd = [int(x[1:]) for x in order if x[0] == BACKWARD]
    return bool(order) and fwd == sorted(fwd) and bwd == sorted(bwd)


def _all_forwards_first(order: list[str]) -> bool:
    first_b = next((i for i, x in enumerate(order) if x[0] == BACKWARD), len(order))
    return all(x[0] == BACKWARD for x in order[first_b:])


def _in_flight(order: list[str]) -> int:
    """The most micro-batches whose forward ran and backward not yet."""
    flight = most = 0
    for x in order:
        flight += 1 if x[0] == FORWARD else -1
        most = max(most, flight)
    return most


def match(parts: list[StagePart]) -> None:
    """Each send of the step with its receive (the k-th from a to b with the k-th on b from a):
    the wait is until the peer's op began, the transfer the rest."""
    ops = {(p.rank, t.kind, t.peer, t.index): t for p in parts for t in p.transfers if t.peer is not None}
    for (rank, kind, other, index), t in ops.items():
        theirs = ops.get((other, RECV if kind == SEND else SEND, rank, index))
        if theirs is None:
            continue
        dur = t.end_ns - t.start_ns
        t.wait_ns = min(max(theirs.start_ns - t.start_ns, 0), dur)
        t.transfer_ns = dur - t.wait_ns


# -- its rows as records --------------------------------------------------------------------------

COLUMNS = {
    "stage": ("Rank", "Stage", "Stages", "Graph", "Step", "Schedule", "Order", "Micro-batches", "Found By",
              "Step Time(us)", "Compute(us)", "Bubble(us)", "Bubble(%)", "Ideal Bubble(%)"),
    "microbatch": ("Rank", "Stage", "Graph", "Step", "Phase", "Micro-batch", "Start(us)", "End(us)",
                   "Compute(us)"),
    "p2p": ("Rank", "Graph", "Step", "Kind", "Peer", "Index", "Start(us)", "Duration(us)", "Wait(us)",
            "Transfer(us)"),
}
NOTE = ("(µs; compute is host time between a micro-batch's receive and its send, no device record needed: "
        "a CPU job's compute is host work, while on a GPU or NPU job it is the launches, which the device's "
        "records would split from the execution; Bubble = step time - compute; Ideal = (p-1)/(m+p-1))")


def records(report: PipelineReport, by: str) -> Iterable[dict]:
    """The rows of ``--by`` (one of ``BY``) as records."""
    if by == "stage":
        return map(record, report.parts)
    if by == "microbatch":
        return (phase_record(part, p) for part in report.parts for p in part.phases)
    return (transfer_record(part, t) for part, t in report.transfers)


def record(part: StagePart) -> dict:
    """One stage and step: its schedule, compute, bubble and the ideal bubble."""
    m = len({p.microbatch for p in part.phases if p.kind == FORWARD})
    bubble = None if part.compute_ns is None else part.step_ns - part.compute_ns
    share = None if bubble is None or not part.step_ns else round(bubble / part.step_ns * 100, 3)
    p = part.stages
    ideal = round((p - 1) / (m + p - 1) * 100, 3) if p and m else None
    return {"Rank": part.rank, "Stage": part.stage, "Stages": p, "Graph": part.graph, "Step": part.step,
            "Schedule": part.schedule, "Order": " ".join(ph.label for ph in part.phases), "Micro-batches": m,
            "Found By": part.found_by, "Step Time(us)": _us(part.step_ns),
            "Compute(us)": _us(part.compute_ns), "Bubble(us)": _us(bubble),
            "Bubble(%)": share, "Ideal Bubble(%)": ideal}


def phase_record(part: StagePart, p: Phase) -> dict:
    return {"Rank": part.rank, "Stage": part.stage, "Graph": part.graph, "Step": part.step,
            "Phase": "forward" if p.kind == FORWARD else "backward", "Micro-batch": p.microbatch,
            "Start(us)": _us(p.start_ns), "End(us)": _us(p.end_ns), "Compute(us)": _us(p.compute_ns)}


def transfer_record(part: StagePart, t: Transfer) -> dict:
    return {"Rank": part.rank, "Graph": part.graph, "Step": part.step, "Kind": t.kind, "Peer": t.peer,
            "Index": t.index, "Start(us)": _us(t.start_ns), "Duration(us)": _us(t.end_ns - t.start_ns),
            "Wait(us)": _us(t.wait_ns), "Transfer(us)": _us(t.transfer_ns)}


def _us(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1000, 3)


# -- the command ----------------------------------------------------------------------------------

def arguments(parser) -> None:
    parser.add_argument("--by", choices=BY, default="stage",
                        help="stage: per stage and step, the schedule, compute and bubble beside the ideal; "
                        "microbatch: each micro-batch's forward and backward; p2p: each send and receive, "
                        "its wait for the peer and its transfer (default: %(default)s)")


def run(args, selection: dict, warn) -> int:
    from .render import Rows

    rows = Rows(args.format, list(COLUMNS[args.by]), NOTE)
    diag = Diagnostics()
    report = pipeline_report(args.profile, diag=diag, **selection)
    warn(args, diag.messages())
    rows.add(records(report, args.by))
    rows.close()
    return 0
