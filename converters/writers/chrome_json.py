"""Chrome trace JSON (``.json``), array form, encoded in chunks (C, as orjson writes each record).

The array form loads even when cut short. Times are µs relative to an origin, with at most 3
decimals: Perfetto reads ``ts`` and ``dur`` as doubles (strings too; ``displayTimeUnit`` changes
nothing), so this is exact to the ns for 10**15 ns (11 days) from the origin, and past that they
are written to the µs, rounded down alike so slices still nest (``held``); absolute epoch µs
would come out to 0.25 µs, some up, some down, so touching slices would overlap. Perfetto drops
events before 0, so each event must lie at or after its origin (``Origins``): one for all ranks
(each event where the Perfetto writer puts it), an hour before their earliest collection start.
Where that is not known before encoding (no start known, events before the start, a rank on a
clock of its own), an encoder takes an hour before the first event of its first chunk (on wall
time, the whole hour before that, which ranks of one job share but by chance); each notes
the span of the events it placed, and ``Origins.settle`` says whether they must be encoded again
from another origin. Flow ids are
written as hex strings: Perfetto rejects numeric ids of 2**63 and more. Each rank is a process
(pid = rank + 1) and each lane a thread named ``<group> / <lane>``, with sort indices in the
Perfetto writer's order. A counter lane ``<name> <key>`` is written as that name and arg key (split
at its last space), which the trace processor names ``<name> <key>``: the lane, as in the
protobuf (a lane without a space: key ``value``). The values of a rank's lanes of one name at one
time are one ``C`` event, after the chunk's slices: Perfetto's cost is per event, and one per
value made our JSON of a torch_npu rank load 1.2x slower than the vendor's, which writes a
bandwidth's value and accelerator in one.
A thread is named in the first chunk of each sequence that uses it (identical repeats), and the
size cap only drops a sequence's later chunks, so every kept thread is named.
Reference: the Trace Event Format document (X, i and M events).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from operator import add, attrgetter
from typing import Any, TypeVar

import orjson

from ..layout import Begin, End, JobProcess, Placement, Track, Value
from ..model import RankInfo
from ._chrome_json_core import encode_chunk

_SEPARATOR = b",\n"
_dumps = partial(orjson.dumps, option=orjson.OPT_NON_STR_KEYS)  # dict args, and what C leaves to orjson
ORIGIN_MARGIN_NS = 3600 * 10**9
EXACT_NS = 10**15  # ns from the origin that JSON holds exactly for Perfetto; past it, µs (``held``)
_MARKER_TID = 999_999
Events = Sequence[Begin | End | Value] | Placement  # a chunk's layout events, or the same compact


class ChromeJsonEncoder:
    """Encodes one Chrome JSON trace as header, chunks, marker and footer."""

    footer = b"\n]\n"

    def __init__(self, origin_ns: int | None, first_tid: int = 1, whole_hours: bool = False) -> None:
        """``origin_ns`` None: not known yet, the first chunk sets it (``own_origin``; a whole hour
        with ``whole_hours``, so that ranks on wall time without a known start mostly choose the
        same). Encoders that write on the same ranks side by side (a rank's own lanes, its
        communication ops) take apart ``first_tid``s, so their threads never share a number."""
        self.origin_ns = origin_ns
        self._whole_hours = whole_hours
        self.span: tuple[int, int] | None = None  # earliest start and latest end placed (encoded or reserved)
        self._first_tid = first_tid
        self._tids: dict[Track, int] = {}
        self._next_tid: dict[int, int] = {}
        self._named: dict[int, set[int]] = {}  # sequence -> tids named on it

    def header(self, ranks: list[RankInfo], job: Iterable[JobProcess] = ()) -> bytes:
        """``[`` and each rank's process name and sort index, in rank order; then the job's own
        processes (``job``), sorted before the ranks."""
        events: list[dict[str, Any]] = []
        for info in ranks:
            events += _process(info.rank, info.title, info.rank, info.description if info.clock else "")
        for process in job:
            events += _process(process.rank, process.title, -1, process.description)
        return b"[\n" + _SEPARATOR.join(map(orjson.dumps, events))

    def chunk(self, sequence: int, events: Events) -> bytes:
        """Complete (``X``) events for the begins, with the arrows bound to each at its start; ends
        need nothing, X carries its duration. Encoded in C (``_chrome_json_core``), as orjson
        writes these records; a ``Placement`` as its ``events()`` would be."""
        if self.origin_ns is None:
            self.origin_ns = own_origin(events, self._whole_hours)
        named = self._named.setdefault(sequence, set())
        data, first, last = encode_chunk(events, self.origin_ns, lambda track: self._tid(track, named),
                                         _dumps, Begin, Value)
        self._placed(first, last)
        return data

    def reserve(self, sequence: int, events: Events) -> None:
        """Number the threads ``chunk`` would number for ``events``, writing nothing: for a chunk
        the size cap can never take, so later ones come out the same."""
        if self.origin_ns is None:
            self.origin_ns = own_origin(events, self._whole_hours)
        if type(events) is Placement:  # its tracks in the order of their first begin
            for track in events.tracks:
                self._number(track)
        else:
            for event in events:
                if type(event) is Begin:
                    self._number(event.track)
        self._placed(*span_of(events))

    def _placed(self, first: int | None, last: int | None) -> None:
        if first is not None:
            old = self.span or (first, last)
            self.span = min(old[0], first), max(old[1], last)

    def marker(self, track: Track, ts_ns: int, name: str, args: dict[str, Any]) -> bytes:
        """An instant on its own thread and a metadata event saying what the size cap left out."""
        pid = track.rank + 1
        self._tids[track] = _MARKER_TID  # rank encoders number their threads from 1
        tid, naming = self._tid(track, set())
        out = bytearray(naming)
        ts = max(ts_ns - (self.origin_ns or 0), 0) / 1000  # a rank on its own clock: at the start
        instant = {"ph": "i", "s": "t", "pid": pid, "tid": tid, "name": name, "ts": ts, "args": args}
        meta = {"ph": "M", "name": "trace2perfetto_cut", "pid": pid, "args": {"name": name, **args}}
        for record in (instant, meta):
            out += _SEPARATOR + orjson.dumps(record)
        return bytes(out)

    def _number(self, track: Track) -> int:
        tid = self._tids.get(track)
        if tid is None:
            tid = self._tids[track] = self._next_tid.get(track.rank, self._first_tid - 1) + 1
            self._next_tid[track.rank] = tid
        return tid

    def _tid(self, track: Track, named: set[int]) -> tuple[int, bytes]:
        """The track's thread, and the metadata records naming it if ``named`` lacks it."""
        tid = self._number(track)
        if tid in named:
            return tid, b""
        named.add(tid)
        pid, name = track.rank + 1, f"{track.group} / {track.lane}"
        order = track.group_order << 24 | track.lane_order
        return tid, b"".join(_SEPARATOR + orjson.dumps(record) for record in (
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}},
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": order}},
        ))


def _process(rank: int, title: str, order: int, labels: str) -> list[dict[str, Any]]:
    """The metadata records of one process: its name, sort index and labels."""
    pid = rank + 1
    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": title}},
              {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": order}}]
    if labels:
        events.append({"ph": "M", "name": "process_labels", "pid": pid, "args": {"labels": labels}})
    return events


def held(ns: int) -> int:
    """ns from the origin (or a duration) as JSON holds them for Perfetto, which reads them as
    doubles: to the ns below ``EXACT_NS``, to the µs (rounded down) from there on; starts and ends
    rounded alike keep their order, so slices still nest (the C writer's ``held``)."""
    return ns if ns < EXACT_NS else ns - ns % 1000


def span_of(events: Events) -> tuple[int | None, int | None]:
    """The earliest start and the latest end of the slices and counter values in ``events``;
    (None, None): none. Read by C iterators (``map``), not a Python loop: a chunk the size cap
    can never take is only numbered and spanned (``reserve``), and a loop was most of its cost."""
    if type(events) is Placement:  # every slice placed has its begin
        slices, values = events.slices, events.values
    else:
        slices = [e.slice for e in events if type(e) is Begin]
        values = [e for e in events if type(e) is Value]
    starts = list(map(_START, slices))
    ends = list(map(add, starts, map(_DUR, slices)))
    times = list(map(_TS, values))
    return (min(starts + times), max(ends + times)) if starts or times else (None, None)


_START, _DUR, _TS = attrgetter("start_ns"), attrgetter("dur_ns"), attrgetter("ts_ns")


def before(ns: int) -> int:
    """An origin for times from ``ns`` on: an hour before it, not before 0 unless ``ns`` is."""
    return max(ns - ORIGIN_MARGIN_NS, min(ns, 0))


def own_origin(events: Events, whole_hours: bool = False) -> int:
    """The origin of an encoder given none: an hour before the first event of its first chunk, or
    the whole hour before that."""
    first = span_of(events)[0]
    origin = before(0 if first is None else first)
    return origin - origin % ORIGIN_MARGIN_NS if whole_hours else origin


Placed = Mapping[int, list[tuple[int, tuple[int, int]]]]  # rank -> (origin, span) of each encoder that placed
T = TypeVar("T")


@dataclass(frozen=True)
class Origins:
    """Where the JSON times count from, in ns: one origin for every rank, so each event lies where
    the Perfetto writer puts it (which writes each time as it is). Ranks on clocks of their own
    once had an origin each: on a MindSpore 1.x job without host_start.log the JSON drew ranks
    2.2 s apart that the .pftrace drew 0.17 ms apart, and the trace processor dropped the arrows
    whose end then came before their start. None: not known before encoding (no collection
    start known, a rank on its own clock), so the encoders take their own (``own_origin``) and
    ``settle`` makes them one."""

    origin: int | None

    @classmethod
    def from_starts(cls, ranks: list[RankInfo]) -> Origins:
        """An hour before the earliest collection start of the ranks on wall time (a rank on its
        own clock knows none: ``settle`` moves the origin before its events where they are earlier)."""
        starts = [r.start_ns for r in ranks if r.wall_clock and r.start_ns is not None]
        return cls(before(min(starts)) if starts else None)

    def of(self, rank: RankInfo) -> int | None:
        return self.origin

    def settle(self, ranks: list[RankInfo], placed: Placed) -> tuple[Origins, bool]:
        """The origin the events placed should count from, and whether any encoder counted from
        another: the earliest its encoders used, or an hour before the earliest event if that is
        earlier or the origin too far from the latest (``EXACT_NS``)."""
        used = [found for rank in ranks for found in placed.get(rank.rank, ())]
        chosen = self.origin
        if used:
            origin = min(o for o, _ in used)
            first, last = min(first for _, (first, _) in used), max(last for _, (_, last) in used)
            chosen = origin if first >= origin and last - origin < EXACT_NS else before(first)
        return Origins(chosen), any(o != chosen for o, _ in used)


def from_one_origin(ranks: list[RankInfo], encode: Callable[[Origins, bool], tuple[list[RankInfo], Placed, T]]
                    ) -> tuple[Origins, Placed, T]:
    """Every rank encoded with its events placed from one origin, by ``encode(origins, afresh)``:
    first from the origin the ranks' collection starts give (``Origins.from_starts``), then, where
    an encoder counted from another (JSON times before their origin, or ranks on wall time apart),
    once more from the origin ``Origins.settle`` chose, ``afresh`` True (what the first encoding
    wrote must be dropped). ``encode`` returns the ranks it encoded (those it could read), where
    each encoder placed its events, and what else its caller needs. Returns the origin the output
    counts from, and the last encoding's placement and rest. A Perfetto encoding places nothing
    (it writes each time as it is): it runs once."""
    origins = Origins.from_starts(ranks)
    encoded, placed, rest = encode(origins, False)
    origins, again = origins.settle(encoded, placed)
    if again:
        _, placed, rest = encode(origins, True)
    return origins, placed, rest


def inexact(placed: Placed) -> list[int]:
    """The ranks with times ``EXACT_NS`` or more past their origin, written to the µs (``held``)."""
    return sorted(rank for rank, used in placed.items() if any(last - o >= EXACT_NS for o, (_, last) in used))
