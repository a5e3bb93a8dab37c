"""The size cap (docs/design.md §6): what fits is chosen by policy, never by where the limit falls.

Encoded chunks (one per rank, step and part) are spooled to a temporary file while the input is
read, so memory holds only their index. Then the output is assembled in priority order:

1. the summary (step trace, overlap lanes) of every rank, step by step in time order; if it
   does not fit and the ranks were not chosen by hand, whole ranks in order of interest
   (``interest_order``: the slowest, the fastest and a median rank first); if even one rank's
   does not fit, whole leading steps of it;
2. detail in whole steps, in time order, all kept ranks of a step together, until the next step
   would not fit.

A trace known to fit whole before it is written (no cap, or all its bytes within it uncompressed)
has nothing to choose: it is written step by step in time order, each step's summary then its
detail, the order the trace processor loads fastest (``_in_time_order``).

A step is what the whole job calls one (``model.StepKey``: graph by the order the rank's graphs ran,
and step id), never the step id alone: each graph numbers its steps from 1. A capture no step bounds
comes in parts (``StepRecords.part``): each part is kept or left out as a step is (a ``Unit``), so
such a capture is cut in time as a stepped one is, not kept or dropped whole.

The byte count is exact, compressed or not: a ``.gz`` output is deflated here, and each step is
tried on a copy of the compressor and kept only if its real compressed bytes fit. Whatever is
left out is said twice: a warning for the caller and a marker inside the trace.
"""

from __future__ import annotations

import heapq
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, NamedTuple

from .errors import UsageError
from .model import StepKey
from .select import format_ids
from .spool import DETAIL, SUMMARY, UNWRITTEN, Chunk, Spool

DEFAULT_MAX_BYTES = 20 * 2**20
MARKER_RESERVE = 4096  # room kept for the cut marker, the footer and the gzip trailer
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, no mtime: reproducible
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int | None:
    """``20M`` -> 20 MiB in bytes; K, M and G are binary; ``0`` means unlimited (None).

    Raises:
        UsageError: not a size.
    """
    found = _SIZE.match(text)
    if not found:
        raise UsageError(f"--max-size: {text!r} is not a size like 20M, 512K, 1G or 0 (unlimited)")
    number, unit = float(found.group(1)), found.group(2).upper()
    size = int(number * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[unit])
    return size or None


class Sink:
    """Writes to ``out`` and counts the bytes that land there; deflates when ``compress``."""

    def __init__(self, out: BinaryIO, limit: int | None, compress: bool) -> None:
        self._out, self.limit = out, limit
        self.written = 0
        self._deflate = zlib.compressobj(6, zlib.DEFLATED, -15) if compress else None
        self._crc = self._size = 0
        if compress:
            self._emit([_GZIP_HEADER])

    def write(self, blocks: Iterator[bytes] | list[bytes], reserve: int = 0) -> bool:
        """Write ``blocks`` whole if they fit with ``reserve`` bytes to spare; else write nothing.

        Only what fits is ever held in memory (at most the limit), and without a limit nothing:
        blocks then stream straight through, however large the group.
        """
        if self.limit is None:
            for block in blocks:
                if self._deflate is not None:
                    self._crc, self._size = zlib.crc32(block, self._crc), self._size + len(block)
                    block = self._deflate.compress(block)
                self._emit([block])
            return True
        room = self.limit - self.written - reserve
        if self._deflate is None:
            held, size = [], 0
            for block in blocks:
                size += len(block)
                if size > room:
                    return False
                held.append(block)
            self._emit(held)
            return True
        trial, crc, size, encoded, encoded_size = self._deflate.copy(), self._crc, self._size, [], 0
        for block in blocks:
            encoded.append(trial.compress(block))
            crc, size = zlib.crc32(block, crc), size + len(block)
            encoded_size += len(encoded[-1])
            if encoded_size > room:
                return False
        encoded.append(trial.flush(zlib.Z_SYNC_FLUSH))
        if encoded_size + len(encoded[-1]) > room:
            return False
        self._deflate, self._crc, self._size = trial, crc, size
        self._emit(encoded)
        return True

    def fits_whole(self, chunks: list[Chunk], footer: bytes) -> bool:
        """Whether ``chunks`` and ``footer`` are known to fit before they are written: with no
        limit, or where their bytes, all encoded and uncompressed, do (a compressed size is only
        known as it is written)."""
        if self.limit is None:
            return True
        return self._deflate is None and all(c.length != UNWRITTEN for c in chunks) and (
            self.written + sum(c.length for c in chunks) + len(footer) <= self.limit)

    def closing_bytes(self, footer: bytes) -> int:
        """At most what writing ``footer`` and finishing will add."""
        if self._deflate is None:
            return len(footer)
        return len(footer) + 64  # deflate's flush of a few bytes, stored worst case, gzip trailer

    def finish(self) -> None:
        if self._deflate is not None:
            self._emit([self._deflate.flush(), struct.pack("<II", self._crc, self._size & 0xFFFFFFFF)])
        self._out.flush()

    def _fits(self, size: int, reserve: int) -> bool:
        return self.limit is None or self.written + size + reserve <= self.limit

    def _emit(self, blocks: list[bytes]) -> None:
        for block in blocks:
            self._out.write(block)
            self.written += len(block)


class Unit(NamedTuple):
    """What the cap keeps or leaves out whole: a step, or one part of the pseudo step."""

    step: StepKey | None
    part: int = 0


@dataclass
class Kept:
    """What made it into the output."""

    steps: list[Unit] = field(default_factory=list)  # every step, in time order
    summary_steps: list[Unit] = field(default_factory=list)
    detail_steps: list[Unit] = field(default_factory=list)
    has_detail: bool = False
    ranks: int = 0
    slices: int = 0
    first_left_out_ns: int | None = None
    ranks_left_out: list[int] = field(default_factory=list)  # by the policy of interest
    policy: str = ""  # why the kept ranks, where some were left out
    graph_names: dict[int, int | None] = field(default_factory=dict)  # StepKey.graph -> id on its lowest rank
    output: str = ""  # the output's name: what a smaller format of it would be

    @property
    def complete(self) -> bool:
        return not self.ranks_left_out and len(self.summary_steps) == len(self.steps) and (
            not self.has_detail or len(self.detail_steps) == len(self.steps)
        )

    def describe(self, every_rank: bool = True) -> str:
        """``detail for steps 1-4 of 10, all 8 ranks; summary for all steps``. ``every_rank``
        False: at most a dozen runs of the ranks left out (for a warning's one line)."""
        total = len(self.steps)
        if self.ranks_left_out:
            left = format_ids(self.ranks_left_out)
            if not every_rank and left.count(",") > 12:
                left = ",".join(left.split(",")[:12]) + ",... (the trace's cut marker lists all)"
            ranks = (f"{self.ranks} of {self.ranks + len(self.ranks_left_out)} ranks ({self.policy}; "
                     f"left out: {len(self.ranks_left_out)} ranks: {left})")
        else:
            ranks = f"all {self.ranks} ranks" if self.ranks != 1 else "its one rank"
        if len(self.summary_steps) < total or self.ranks_left_out:
            no_detail = "; no detail" if self.has_detail else ""
            of = _count(self.steps, short=True)
            steps = (f"all {_count(self.steps)}" if len(self.summary_steps) == total
                     else f"{_steps(self.summary_steps, self.steps, self.graph_names)} of {of}")
            return f"summary for {steps}, {ranks}{no_detail}"
        every = "steps" if any(u.step is not None for u in self.steps) else "of it"
        detail = _steps(self.detail_steps, self.steps, self.graph_names)
        return f"detail for {detail} of {_count(self.steps, short=True)}, {ranks}; summary for all {every}"

    def hint(self) -> str:
        """How to see what was left out, in ways that can: ``--steps`` the steps left out (ids of
        every graph) where some were kept, fewer steps where none was, none where the output is
        one step; ``--step-marker`` where time no step bounds was cut (marked, its steps can be
        chosen); ``--ranks`` where there are several; a denser output format; ``--max-size 0``."""
        summary, detail = set(self.summary_steps), set(self.detail_steps)  # thousands in a long capture
        left = [u for u in self.steps if u not in summary or (self.has_detail and u not in detail)]
        numbered = [u.step.step for u in left if u.step is not None]
        ways = []
        if numbered and len(left) < len(self.steps):  # the rest, apart from what fitted
            ways.append(f"--steps {format_ids(numbered)}")
        elif len(numbered) > 1:  # nothing of them fitted: fewer at a time
            ways.append(f"fewer steps (--steps {numbered[0]})")
        if any(u.step is None for u in left) and sum(u.step is None for u in self.steps) > 1:
            ways.append("--step-marker NAME (to mark steps)")
        if self.ranks + len(self.ranks_left_out) > 1:
            ways.append("--ranks")
        if self.has_detail:
            ways.append("--kind summary")
        ways += _denser(self.output)
        return f"to see the rest use {', '.join(ways)}, or --max-size 0 (unlimited)"


def _denser(output: str) -> list[str]:
    """The output formats that hold the same trace in fewer bytes than ``output``'s: a ``.pftrace``
    (protobuf: a fraction of JSON) and the compressed forms, whose cap counts compressed bytes."""
    name = output.lower()
    if name.endswith(".json"):
        return ["a .pftrace or .json.gz output"]
    if name.endswith(".pftrace"):
        return ["a .pftrace.gz output"]
    return []


def _count(units: list[Unit], short: bool = False) -> str:
    """``5 steps`` (``short``: ``5``, where all are steps), ``12 parts of the time no step bounds``,
    or both."""
    steps = sum(u.step is not None for u in units)
    parts = len(units) - steps
    if short and not parts:
        return str(steps)
    texts = [f"{steps} step{'s' if steps != 1 else ''}"] if steps or not parts else []
    if parts:
        texts.append("the time no step bounds" if parts == 1 else f"{parts} parts of the time no step bounds")
    return " and ".join(texts)


def _steps(units: list[Unit], every: list[Unit], graph_names: dict[int, int | None]) -> str:
    """``steps 1-4``; where the job has several graphs, per graph: ``graph 2 steps 1-3, graph 5
    step 1`` (named as the lowest rank numbers it); parts of the time no step bounds by number
    (``parts 1-9``), where ``every`` unit holds more than one."""
    if not units:
        return "none" if any(u.step is None for u in every) else "no steps"
    by_graph: dict[int, list[int]] = {}
    for u in units:
        if u.step is not None:
            by_graph.setdefault(u.step.graph, []).append(u.step.step)
    texts = [f"step{'s' if len(ids) > 1 else ''} {format_ids(ids)}" for ids in by_graph.values()]
    if len(graph_names) >= 2:
        texts = [f"graph {_graph_name(graph_names.get(g), g)} {text}"
                 for g, text in zip(by_graph, texts, strict=True)]
    parts = [u.part + 1 for u in units if u.step is None]
    if parts:
        whole = sum(u.step is None for u in every) == 1
        texts.append("the time no step bounds" if whole
                     else f"part{'s' if len(parts) > 1 else ''} {format_ids(parts)}")
    return ", ".join(texts)


def _graph_name(graph: int | None, place: int) -> str:
    return f"#{place + 1}" if graph is None else str(graph)


def assemble(
    sink: Sink, spool: Spool, header: Callable[[set[int] | None], bytes], footer: bytes,
    marker: Callable[[Kept], bytes], interest: tuple[list[int], str] | None = None, output: str = "",
) -> Kept:
    """Write header, the chunks that fit by policy, the cut marker if anything was left out, footer.

    ``header(ranks)`` is the header for those ranks (None: all). ``interest``: the ranks in the
    order to keep them, and that policy in words, where whole ranks may be left out (the ranks
    were not chosen by hand); see ``interest_order``. ``output``: the output's name, for the hint.

    Raises:
        UsageError: the limit is too small for even the header.
    """
    reserve = sink.closing_bytes(footer) + MARKER_RESERVE if sink.limit is not None else 0
    chunks_kept, left_out = _by_interest(spool.chunks, interest, sink, len(header(None)) + reserve)
    order = _steps_in_time_order(chunks_kept)
    kept = Kept(steps=order, ranks=len({c.rank for c in chunks_kept}),
                has_detail=any(c.kind == DETAIL for c in spool.chunks), ranks_left_out=left_out,
                policy=interest[1] if left_out else "", graph_names=_graph_names(spool.chunks), output=output)
    if not sink.write([header({c.rank for c in chunks_kept} if left_out else None)], reserve):
        raise UsageError(f"--max-size {sink.limit} is too small: the trace header alone needs more")
    groups = _groups(chunks_kept, order)
    last_group = list(groups)[-1] if groups else None
    kinds = ((SUMMARY, kept.summary_steps),) + (() if left_out else ((DETAIL, kept.detail_steps),))
    if not left_out and sink.fits_whole(chunks_kept, footer):
        _in_time_order(sink, spool, groups, order, kinds, kept)
        kinds = ()
    for kind, done in kinds:
        for step in order:
            # A chunk goes right after the one before it in its sequence (interning, tracks): the
            # order of the steps keeps every sequence's (_steps_in_time_order).
            chunks = groups.get((kind, step), [])  # in encoding order within the group
            # The last group needs no room for a marker: if it fits, nothing is left out.
            room = sink.closing_bytes(footer) if (kind, step) == last_group else reserve
            if any(c.length == UNWRITTEN for c in chunks) or not sink.write(
                    (b for c in chunks for b in spool.read(c)), room):
                kept.first_left_out_ns = min((c.start_ns for c in chunks), default=None)
                break
            done.append(step)
            kept.slices += sum(c.slices for c in chunks)
        if len(done) < len(order):
            break
    if not kept.complete:
        if kept.first_left_out_ns is None:
            kept.first_left_out_ns = max(c.start_ns for c in chunks_kept)
        sink.write([marker(kept)])
    sink.write([footer])
    sink.finish()
    return kept


def _in_time_order(sink: Sink, spool: Spool, groups: dict[tuple[str, Unit], list[Chunk]], order: list[Unit],
                   kinds: tuple[tuple[str, list[Unit]], ...], kept: Kept) -> None:
    """Every chunk, step by step in time order, each step's summary then its detail: what the
    trace processor loads fastest (6-8% less CPU than every summary before any detail on a torch_npu
    rank: docs/benchmarks-journal.md), for a trace known to fit whole (``Sink.fits_whole``)."""
    for step in order:
        for kind, done in kinds:
            chunks = groups.get((kind, step), [])
            if not sink.write(b for c in chunks for b in spool.read(c)):  # never silently short
                raise RuntimeError(f"the trace was known to fit in {sink.limit} bytes, yet did not")
            done.append(step)
            kept.slices += sum(c.slices for c in chunks)


def _by_interest(chunks: list[Chunk], interest: tuple[list[int], str] | None, sink: Sink,
                 overhead: int) -> tuple[list[Chunk], list[int]]:
    """The summary chunks of the ranks whose whole summary fits, taken in order of interest, and
    the ranks left out; all chunks where the whole summary fits or no order is given. With ranks
    left out no detail is written: its arrows between ranks would lose an end."""
    if interest is None or sink.limit is None:
        return chunks, []
    sizes: dict[int, int] = {}
    for c in chunks:
        sizes[c.rank] = sizes.get(c.rank, 0) + (c.length if c.kind == SUMMARY else 0)
    room = sink.limit - overhead
    if sum(sizes.values()) <= room:
        return chunks, []
    chosen: set[int] = set()
    for rank in interest[0]:
        if rank in sizes:
            if chosen and sizes[rank] > room:
                break
            chosen.add(rank)  # the first always: if it alone does not fit, its leading steps do
            room -= sizes[rank]
    return [c for c in chunks if c.rank in chosen and c.kind == SUMMARY], sorted(sizes.keys() - chosen)


def _graph_names(chunks: list[Chunk]) -> dict[int, int | None]:
    """Each graph of the job (``StepKey.graph``) by its id on the lowest rank that has it."""
    names: dict[int, tuple[int, int | None]] = {}
    for c in chunks:
        if c.step is not None and (c.step.graph not in names or c.rank < names[c.step.graph][0]):
            names[c.step.graph] = (c.rank, c.graph)
    return {graph: name for graph, (_, name) in sorted(names.items())}


def _steps_in_time_order(chunks: list[Chunk]) -> list[Unit]:
    """Steps (and parts) by when they first started on any rank, but never before one that comes
    earlier in some rank's own sequence of chunks (which is the order it was encoded in). The keys
    of a sequence rise in that order (``profile.keyed``; the pseudo step is a sequence apart, its
    parts in order), so the ranks never disagree on the order of two steps.

    Raises:
        RuntimeError: the ranks' sequences disagree after all (steps keyed otherwise).
    """
    first: dict[Unit, int] = {}
    for c in chunks:
        unit = Unit(c.step, c.part)
        first[unit] = min(first.get(unit, c.start_ns), c.start_ns)
    after: dict[Unit, set[Unit]] = {unit: set() for unit in first}
    waiting = dict.fromkeys(first, 0)
    previous: dict[tuple[tuple[int, int], str], Unit] = {}
    for c in sorted(chunks, key=lambda c: (c.sequence, c.kind, c.ordinal)):
        key, unit = (c.sequence, c.kind), Unit(c.step, c.part)
        if key in previous and previous[key] != unit and unit not in after[previous[key]]:
            after[previous[key]].add(unit)
            waiting[unit] += 1
        previous[key] = unit
    rank = {u: (first[u], () if u.step is None else u.step, u.part) for u in first}
    ready = [(rank[s], i, s) for i, s in enumerate(first) if waiting[s] == 0]
    heapq.heapify(ready)
    order: list[Unit] = []
    left = set(first)
    while left:
        if not ready:
            raise RuntimeError(f"chunk sequences disagree on the order of steps {sorted(left, key=rank.get)}")
        _, _, step = heapq.heappop(ready)
        if step not in left:
            continue
        left.discard(step)
        order.append(step)
        for nxt in after[step]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0 and nxt in left:
                heapq.heappush(ready, (rank[nxt], len(order), nxt))
    return order


def _groups(chunks: list[Chunk], order: list[Unit]) -> dict[tuple[str, Unit], list[Chunk]]:
    """Chunks by (kind, step), in the order they are written; within one, by rank, then each
    packet sequence's in its order (never by where they lie in their spool files: which file's
    came first would then hang on the sizes of what was spooled before)."""
    position = {unit: i for i, unit in enumerate(order)}
    groups: dict[tuple[str, Unit], list[Chunk]] = {}
    key = lambda c: (c.kind != SUMMARY, position[c.step, c.part], c.rank, c.sequence, c.ordinal)  # noqa: E731
    for c in sorted(chunks, key=key):
        groups.setdefault((c.kind, Unit(c.step, c.part)), []).append(c)
    return groups


def interest_order(ranks: list[int], step_ns: dict[int, float],
                   wait_caused_ns: dict[int, int]) -> tuple[list[int], str]:
    """Ranks in the order a capped summary keeps them, and the policy said in words: the rank that
    made the others wait longest, the slowest, the fastest and the median rank by mean step time,
    then the others by the wait they caused, then by how far their step time lies from the median.
    A rank without steps counts as 0 ns.
    """
    ranks = sorted(ranks)
    if not ranks:
        return [], ""
    by_time = sorted(ranks, key=lambda r: (step_ns.get(r, 0.0), r))
    median = by_time[(len(by_time) - 1) // 2]
    middle = step_ns.get(median, 0.0)
    caused = max(ranks, key=lambda r: (wait_caused_ns.get(r, 0), -r))
    named = {"most wait caused": caused} if wait_caused_ns.get(caused, 0) > 0 else {}
    named.update({"slowest": by_time[-1], "fastest": by_time[0], "median": median})
    first = list(dict.fromkeys(named.values()))
    rest = sorted(set(ranks) - set(first),
                  key=lambda r: (-wait_caused_ns.get(r, 0), -abs(step_ns.get(r, 0.0) - middle), r))
    policy = ("ranks kept by interest: " + ", ".join(f"{what} {rank}" for what, rank in named.items())
              + ", then by wait caused and distance from the median step time")
    return first + rest, policy
