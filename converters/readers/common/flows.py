"""Flow arrows: a rank's flow ends bound to the slices they start and end in, step by step.

Shared by the readers that draw arrows: ``chrome_trace`` (and so ``msprof``, ``ascend_pt``,
``kineto``, ``paddle``) binds ends with ``Linker``; ``ascend_db`` joins its own and names them
with ``flow_id``. The hot loops are C (``readers/c/flows.c``: ``bind_ends``, ``arrow``, ``arrows``,
``flow_id``).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from ...errors import Diagnostics
from ...model import FlowEnd, Slice, StepRecords
from .._core import arrow, arrows
from .._core import bind_ends as _bind_ends
from .._core import flow_id as _flow_id
from .parts import PARTS_AHEAD


def linked(steps: Iterable[tuple[StepRecords, list[FlowEnd]]], diag: Diagnostics,
           window: int = 1, events: bool = True) -> Iterator[StepRecords]:
    """The steps (in time order) with their flow arrows bound, within a step and across up to
    ``window`` steps (a host launch at the end of one step whose kernel runs in the next), or
    ``PARTS_AHEAD`` parts of a pseudo step: the next ones are read ahead, and a step that starts
    such an arrow is held back until the step where it ends is read. See ``Linker`` for how ends
    bind (and ``events``)."""
    linker = Linker(events)
    upcoming = iter(steps)
    ahead: deque[tuple[StepRecords, list[FlowEnd], set[str]]] = deque()
    index = 0
    while True:
        while len(ahead) <= _reach(ahead, window) and (item := next(upcoming, None)) is not None:
            ahead.append((item[0], item[1], {end.key for end in item[1] if not end.starts}))
        if not ahead:
            break
        records, ends, _ = ahead.popleft()

        def lasts(keys: Iterable[str], i: int = index) -> dict[str, int]:
            found = {}
            for j, (_, _, finishing) in enumerate(ahead):
                found.update(dict.fromkeys(finishing.intersection(keys), i + 1 + j))
            return found

        yield from linker.add(index, records, ends, lasts)
        index += 1
    yield from linker.finish(diag)


def _reach(ahead: deque, window: int) -> int:
    """How many steps ``linked`` reads ahead: ``window``, or ``PARTS_AHEAD`` for a pseudo step's parts."""
    return window if not ahead or ahead[0][0].part is None else max(window, PARTS_AHEAD)


class Linker:
    """Binds one rank's flow ends to slices, step by step in time order, with memory bounded by
    what is pending (steps holding the start of an arrow whose end is still to come), not the file.

    An end binds to the innermost slice of its lane that holds its time (Chrome's ``bp: e``); an
    arrow is made only when both of its ends bind, so none dangles (a dangling end is an import
    error in Perfetto). An end joins the last start of its id before it, so an id used again
    later starts new arrows; a start with several ends (a copy launched once, run twice) makes
    one arrow per end. An arrow whose end begins before its start is left out and counted:
    Perfetto drops such arrows without a word (host and device clocks disagree by a few µs).
    So are the flow events that make no arrow (``Unjoined``): a start no end joins, an end that
    joins no start, and either end outside every slice of its lane. They are warned of when the
    ends are the profile's flow events (``events``), not when they are taken from slices that are
    drawn anyway (Kineto's and Paddle's correlation ids: most runtime calls launch nothing).
    """

    def __init__(self, events: bool = True) -> None:
        self._events = events
        self._held: deque[list] = deque()  # [StepRecords, arrows still open from it], in time order
        # key -> [held entry, slice index, arrows made, last step, whether an end joined it]
        self._pending: dict[str, list] = {}
        self._backwards = 0
        self._unjoined = Unjoined()
        self._rank: int | None = None

    def add(self, index: int, records: StepRecords, ends: list[FlowEnd],
            lasts: Callable[[Iterable[str]], dict[str, int]]) -> Iterator[StepRecords]:
        """Bind step ``index``; ``lasts(keys)`` says for the keys that end in a later step the last
        such step. Yields the steps no arrow can reach any more, in order."""
        self._rank = records.rank
        entry = [records, 0]
        bound = bind_ends(records.slices, ends, self._pending)
        if bound.outside_starts or bound.outside_ends:  # rare but at a profile's edges: a look at why
            self._unjoined.count_bare(records.slices, ends)
        del ends  # freed now, while in the cache (where the caller holds no other reference)
        made: dict[int, int] = {}  # start slice -> its arrows so far
        self._backwards += arrows(records.slices, bound.arrows, made, records.rank)  # C: _arrow's, each
        unjoined = self._unjoined
        unjoined.count(bound)
        for key, target, fallback in bound.unstarted:
            pending = self._pending.get(key)
            if pending is not None:
                pending[2] = self._arrow(key, pending[0][0], pending[1], records, target, pending[2])
                pending[4] = True
            elif fallback is not None:  # its only start here comes later: a backwards arrow
                made[fallback] = self._arrow(key, records, fallback, records, target, made.get(fallback, 0))
            else:
                unjoined.ends += 1
        later = lasts(bound.last_starts) if bound.last_starts else {}
        # by set operations, not a loop over every start of the step (most are neither pending
        # nor ended later); the order of _pending counts for nothing
        for key in self._pending.keys() & bound.last_starts.keys():
            self._release(key)  # an id used again: the ends still to come belong to this start
        for key, last in later.items():
            first = bound.last_starts[key]
            self._pending[key] = [entry, first, made.get(first, 0), last, key not in bound.open_lasts]
            entry[1] += 1
        unjoined.starts += len(bound.open_lasts - later.keys())  # no end joins them, here or later
        for key in [key for key, pending in self._pending.items() if pending[3] <= index]:
            self._release(key)
        self._held.append(entry)
        yield from self._ready()

    def finish(self, diag: Diagnostics) -> Iterator[StepRecords]:
        """The steps still held, then warnings counting the arrows and flow events left out."""
        for key in list(self._pending):
            self._release(key)
        yield from self._ready()
        warn_backwards_flows(diag, self._rank, self._backwards)
        if self._events:
            warn_unjoined_flows(diag, self._rank, self._unjoined)

    def _arrow(self, key: str, source: StepRecords, first: int, target: StepRecords, last: int,
               k: int) -> int:
        """An arrow from ``source.slices[first]`` to ``target.slices[last]``, the ``k``-th of its
        start; returns how many that start has made. Ids are unique across ranks and starts."""
        made = arrow(source.slices, first, target.slices, last, key, k, target.rank)  # C: readers/c/flows.c
        if made == k:  # it would end before it starts
            self._backwards += 1
        return made

    def _release(self, key: str) -> None:
        """No later end can join ``key``'s start any more: its step may go, and the start is counted
        if no end joined it."""
        pending = self._pending.pop(key, None)
        if pending is not None:
            pending[0][1] -= 1
            self._unjoined.starts += not pending[4]

    def _ready(self) -> Iterator[StepRecords]:
        while self._held and self._held[0][1] == 0:
            yield self._held.popleft()[0]


class Bound(NamedTuple):
    """A step's flow ends bound to its slices (indices into them)."""

    arrows: list[tuple[str, int, int]]  # (key, start, end): the end's last start of its key before it
    unstarted: list[tuple[str, int, int | None]]  # (key, end, a later start here): no start before it
    last_starts: dict[str, int]  # each key's last start, which later steps' ends may join
    open_lasts: set[str]  # the keys whose last start no end of this step joins
    unended: int  # starts no end joins whose id is used again later in the step: none ever will
    outside_starts: int  # starts in no slice of their lane
    outside_ends: int  # ends in no slice of their lane


def bind_ends(slices: list[Slice], ends: list[FlowEnd], pending: dict[str, object] | None = None) -> Bound:
    """Each flow end's slice (the innermost slice of its lane holding its time), and which start
    each end joins within the step: the last start of its key at or before it, else (no start
    before it) the start of its key an earlier step holds open (a key of ``pending``), else its
    first start here (C: ``readers/c/flows.c``)."""
    return Bound(*_bind_ends(slices, ends, {} if pending is None else pending)) if ends else _NO_ENDS


_NO_ENDS = Bound([], [], {}, set(), 0, 0, 0)


class Unjoined:
    """A rank's flow events that made no arrow: starts no end joined, ends that joined no start,
    and ends of either kind in no slice of their lane; of those, the ends on a lane that holds no
    slice in their step (bare: a thread whose events the profiler did not write)."""

    __slots__ = ("starts", "ends", "outside_starts", "outside_ends", "bare_starts", "bare_ends")

    def __init__(self) -> None:
        self.starts = self.ends = self.outside_starts = self.outside_ends = 0
        self.bare_starts = self.bare_ends = 0

    def count(self, bound: Bound) -> None:
        """Add a step's starts its id's reuse left unjoined, and its ends in no slice."""
        self.starts += bound.unended
        self.outside_starts += bound.outside_starts
        self.outside_ends += bound.outside_ends

    def count_bare(self, slices: list[Slice], ends: list[FlowEnd]) -> None:
        """Add a step's ends on lanes that hold none of its slices."""
        lanes = {(s.layer, s.lane) for s in slices}
        for end in ends:
            if (end.layer, end.lane) not in lanes:
                if end.starts:
                    self.bare_starts += 1
                else:
                    self.bare_ends += 1

    def total(self) -> int:
        return self.starts + self.ends + self.outside_starts + self.outside_ends

    def reasons(self) -> list[str]:
        """What made no arrow, by cause: the causes that hold only."""
        found = []
        if self.bare_starts or self.bare_ends:
            found.append(f"{self.bare_starts} starts and {self.bare_ends} ends on a thread or stream holding "
                         "no event in their step (the profiler wrote the flow events, not the events they "
                         "belong to: torch_npu at profiler level 0 writes its launches' flow starts on CANN "
                         "threads whose calls it does not record)")
        if self.ends:
            found.append(f"{self.ends} ends that joined no start (theirs was not recorded or made no arrow: "
                         "before the profiler started, in no event, or more than MAX_FLOW_STEPS steps back)")
        if self.starts:
            found.append(f"{self.starts} starts no end joined (theirs was not recorded: after the profiler "
                         "stopped, or more than MAX_FLOW_STEPS steps on)")
        starts, ends = self.outside_starts - self.bare_starts, self.outside_ends - self.bare_ends
        if starts or ends:
            found.append(f"{starts} starts and {ends} ends in no slice of their lane (the event holding "
                         "them was not recorded, as at a profile's edges)")
        return found


def warn_backwards_flows(diag: Diagnostics, rank: int | None, count: int, where: str = "") -> None:
    """Count the rank's arrows left out for ending before they start: records not drawn, so a
    warning (``--strict`` fails on it), not a note."""
    if count:
        diag.warn(f"backwards_flows {rank}", f"rank {rank}: {count} arrows whose end begins before their "
                  f"start (host and device clocks disagree) left out: Perfetto cannot draw them{where}")


def warn_unjoined_flows(diag: Diagnostics, rank: int | None, unjoined: Unjoined) -> None:
    """Count the rank's flow events that made no arrow: records not drawn, so a warning (the
    project's rule: every record lands in the output or in a warning that counts it), though it
    is normal at a profile's edges, where the other end was not recorded."""
    if unjoined.total():
        diag.warn(f"unjoined_flows {rank}", f"rank {rank}: {unjoined.total()} flow events made no arrow: "
                  + "; ".join(unjoined.reasons()))


def forget_flow_warnings(diag: Diagnostics, rank: int) -> None:
    """Take back the rank's warnings of arrows left out (``warn_backwards_flows``,
    ``warn_unjoined_flows``): for a read whose command draws no arrows (``profile.read_profile``
    unless ``Options.draws_arrows``), of which they are not true."""
    diag.forget(f"backwards_flows {rank}")
    diag.forget(f"unjoined_flows {rank}")


def flow_id(rank: int, key: str, k: int) -> int:
    """A flow id unique across ranks: the profilers' ids are unique within one rank only (the
    8-byte BLAKE2b of ``rank|key|k`` as a little-endian int, computed in C: ``_core.flow_id``)."""
    return _flow_id(f"{rank}|{key}|{k}")

# The rules ``bind_ends``' C follows (``_core.enclosing``, ``_core.bind_ends``), in Python: the reference
# tests/readers/test_chrome_trace.py holds C to (a Python loop per end was a tenth of a detail conversion)
_NESTED = 65  # an end's slice is looked for among the slices of its lane that start last at or before it


def enclosing_rules(slices: list[Slice], ends: list[FlowEnd]) -> list[int | None]:
    """Each flow end's slice: the innermost of its lane holding its time (the one that starts last,
    the shorter at equal starts, the later of equals), among the ``_NESTED`` that start last at or
    before it; None for none."""
    lanes: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    for i, s in enumerate(slices):
        lanes[s.layer, s.lane].append((s.start_ns, -s.dur_ns, i))
    for members in lanes.values():
        members.sort()
    found = []
    for end in ends:
        members = lanes.get((end.layer, end.lane), [])
        started = bisect.bisect_right([start for start, _, _ in members], end.start_ns)
        holders = [i for start, neg_dur, i in reversed(members[max(started - _NESTED, 0):started])
                   if start <= end.start_ns <= start - neg_dur]
        found.append(holders[0] if holders else None)
    return found


def bind_ends_rules(slices: list[Slice], ends: list[FlowEnd], pending: Iterable[str]) -> tuple:
    """``bind_ends``' Bound as a plain tuple: each end's slice (``enclosing_rules``), and which start
    it joins; then which starts no end joins, and the ends in no slice."""
    starts = defaultdict(list)  # key -> [(time, slice)]
    finishes = []
    outside = Counter()
    for end, index in zip(ends, enclosing_rules(slices, ends), strict=True):
        if index is None:
            outside[end.starts] += 1
        else:
            if end.starts:
                starts[end.key].append((end.start_ns, index))
            else:
                finishes.append((end.key, end.start_ns, index))
    for found in starts.values():
        found.sort()
    joins, unstarted, joined = [], [], set()
    for key, ts, index in finishes:
        found = starts.get(key)
        position = bisect.bisect_right(found, (ts, len(slices))) - 1 if found else -1
        if position >= 0:
            joins.append((key, found[position][1], index))
            joined.add((key, position))
        else:
            unstarted.append((key, index, found[0][1] if found else None))
            if found and key not in pending:
                joined.add((key, 0))
    unended = sum((key, i) not in joined for key, found in starts.items() for i in range(len(found) - 1))
    open_lasts = {key for key, found in starts.items() if (key, len(found) - 1) not in joined}
    return (joins, unstarted, {key: found[-1][1] for key, found in starts.items()}, open_lasts, unended,
            outside[True], outside[False])

