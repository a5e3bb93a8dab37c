"""Chrome trace JSON (``.json``), array form, encoded in chunks (C, as orjson writes each record).

The array form loads even when cut short. Times are µs relative to ``origin_ns`` with at most 3
decimals, so they are exact to the ns (for 100 days from the origin); absolute epoch µs would not
be, as a float (Perfetto parses ``ts`` as a double, strings too). Perfetto drops events before 0,
so the origin lies an hour before the earliest collection start of the ranks on wall time, and a
rank on its own clock (``origin_ns`` None) takes an hour before its first event. Flow ids are
written as hex strings: Perfetto rejects numeric ids of 2**63 and more. Each rank is a process
(pid = rank + 1) and each lane a thread named ``<group> / <lane>``, with sort indices in the
Perfetto writer's order.
A thread is named in the first chunk of each sequence that uses it (identical repeats), and the
size cap only drops a sequence's later chunks, so every kept thread is named.
Reference: the Trace Event Format document (X, i and M events).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import orjson

from ..layout import Begin, End, Track, Value
from ..model import RankInfo
from ._chrome_json_core import encode_chunk

_SEPARATOR = b",\n"
_dumps = partial(orjson.dumps, option=orjson.OPT_NON_STR_KEYS)  # dict args, and what C leaves to orjson
ORIGIN_MARGIN_NS = 3600 * 10**9
_MARKER_TID = 999_999


class ChromeJsonEncoder:
    """Encodes one Chrome JSON trace as header, chunks, marker and footer."""

    footer = b"\n]\n"

    def __init__(self, origin_ns: int | None, first_tid: int = 1) -> None:
        """``origin_ns`` None: a rank on its own clock, whose first chunk sets it. Encoders that write
        on the same ranks side by side (a rank's own lanes, its communication ops) take apart
        ``first_tid``s, so their threads never share a number."""
        self.origin_ns = origin_ns
        self._first_tid = first_tid
        self._tids: dict[Track, int] = {}
        self._next_tid: dict[int, int] = {}
        self._named: dict[int, set[int]] = {}  # sequence -> tids named on it

    def header(self, ranks: list[RankInfo]) -> bytes:
        """``[`` and each rank's process name and sort index, in rank order."""
        events: list[dict[str, Any]] = []
        for info in ranks:
            pid = info.rank + 1
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": info.title}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid,
                           "args": {"sort_index": info.rank}})
            if info.clock:
                labels = info.description
                events.append({"ph": "M", "name": "process_labels", "pid": pid, "args": {"labels": labels}})
        return b"[\n" + _SEPARATOR.join(map(orjson.dumps, events))

    def chunk(self, sequence: int, events: Sequence[Begin | End | Value]) -> bytes:
        """Complete (``X``) events for the begins, with the arrows bound to each at its start; ends
        need nothing, X carries its duration. Encoded in C (``_chrome_json_core``), as orjson
        writes these records."""
        if self.origin_ns is None:
            self.origin_ns = own_origin(events)
        named = self._named.setdefault(sequence, set())
        return encode_chunk(events, self.origin_ns, lambda track: self._tid(track, named), self._value,
                            _dumps, Begin, Value)

    def _value(self, event: Value) -> bytes:
        return orjson.dumps({"ph": "C", "pid": event.track.rank + 1, "name": event.track.lane,
                             "ts": (event.ts_ns - self.origin_ns) / 1000, "args": {"value": event.value}})

    def reserve(self, sequence: int, events: Sequence[Begin | End | Value]) -> None:
        """Number the threads ``chunk`` would number for ``events``, writing nothing: for a chunk
        the size cap can never take, so later ones come out the same."""
        if self.origin_ns is None:
            self.origin_ns = own_origin(events)
        for event in events:
            if type(event) is Begin:
                self._number(event.track)

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


def wall_origin(ranks: list[RankInfo]) -> int:
    """The origin of the ranks on wall time: an hour before their earliest collection start."""
    starts = [r.start_ns for r in ranks if r.wall_clock and r.start_ns is not None]
    return max(min(starts, default=0) - ORIGIN_MARGIN_NS, 0)


def own_origin(events: Sequence[Begin | End | Value]) -> int:
    """The origin of a rank on its own clock: an hour before the first event it writes."""
    times = [e.slice.start_ns if type(e) is Begin else e.ts_ns for e in events if type(e) is not End]
    return max(min(times, default=0) - ORIGIN_MARGIN_NS, 0)
