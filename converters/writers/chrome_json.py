"""Chrome trace JSON (``.json``), array form, streamed with orjson.

The array form loads even when cut short. Times are µs relative to ``origin_ns`` (the earliest
collection start of the written ranks) with at most 3 decimals, so they are exact to the ns;
absolute epoch µs would not be, as a float. Each rank is a process (pid = rank + 1) and each
lane a thread named ``<group> / <lane>``, with sort indices in the Perfetto writer's order.
Reference: the Trace Event Format document (X, i and M events).
"""

from __future__ import annotations

from typing import Any, BinaryIO

import orjson

from ..layout import Track
from ..model import RankInfo, Slice


class ChromeJsonWriter:
    """Writes one Chrome JSON trace to ``out``; create one per output."""

    def __init__(self, out: BinaryIO, origin_ns: int) -> None:
        self._out = out
        self._origin_ns = origin_ns
        self._tids: dict[Track, int] = {}
        self._next_tid: dict[int, int] = {}
        self._separator = b"[\n"
        self.bytes_written = 0

    def add_rank(self, info: RankInfo) -> None:
        """Declare the rank's process; call in rank order before its slices."""
        pid = info.rank + 1
        self._write({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": info.title}})
        self._write({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": info.rank}})
        if info.clock:
            labels = f"{info.format} profile {info.path}; times: {info.clock}"
            self._write({"ph": "M", "name": "process_labels", "pid": pid, "args": {"labels": labels}})

    def begin(self, track: Track, s: Slice) -> None:
        event = {
            "ph": "X", "pid": track.rank + 1, "tid": self._tid(track), "name": s.name,
            "ts": self._us(s.start_ns), "dur": s.dur_ns / 1000,
        }
        if s.args:
            event["args"] = s.args
        self._write(event)

    def end(self, track: Track, ts_ns: int) -> None:
        """Complete events carry their duration; nothing to write."""

    def instant(self, track: Track, ts_ns: int, name: str, args: dict[str, Any] | None = None) -> None:
        event = {"ph": "i", "s": "t", "pid": track.rank + 1, "tid": self._tid(track), "name": name,
                 "ts": self._us(ts_ns)}
        if args:
            event["args"] = args
        self._write(event)

    def close(self) -> None:
        self._out.write(b"[]\n" if self._separator == b"[\n" else b"\n]\n")
        self.bytes_written += 3
        self._out.flush()

    def _us(self, ts_ns: int) -> float:
        return (ts_ns - self._origin_ns) / 1000

    def _tid(self, track: Track) -> int:
        tid = self._tids.get(track)
        if tid is None:
            tid = self._tids[track] = self._next_tid.get(track.rank, 0) + 1
            self._next_tid[track.rank] = tid
            pid, name = track.rank + 1, f"{track.group} / {track.lane}"
            order = track.group_order << 24 | track.lane_order
            self._write({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            self._write({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                         "args": {"sort_index": order}})
        return tid

    def _write(self, event: dict[str, Any]) -> None:
        data = self._separator + orjson.dumps(event, option=orjson.OPT_NON_STR_KEYS)
        self._separator = b",\n"
        self._out.write(data)
        self.bytes_written += len(data)
