"""The first pass of ``chrome_trace.read_merged`` without scanning every event: the metadata and
the events that may be steps, found by text each of them must hold (issue 28: a summary of
torch_npu's ``trace_view.json`` is two scans of the file, the first one for ~100 events).

A metadata event holds ``"M"`` (its phase); an event that may be a step in Ascend's files
``ProfilerStep#``, ``Iteration Time`` or ``"Reduce"`` (``_core.steps_and_names``' rules), unless
written with escapes. Each place one of these lies is read as the event around it (decoded alone,
as ``_core.scan`` decodes each event) and sorted out by ``steps_and_names``, as the first pass
does. What this finds is a guess: the records pass sees every event and says which are metadata
and steps, and where the two differ (an escaped word, an event around a hit not found, one found
inside an array of args, Paddle's ``ProfileStep``) the reader reads the file again the usual way
(``chrome_trace._sought``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import msgspec

from .._core import WIDE_SEARCH, RawEvents, found_at, scan, steps_and_names
from .events import Event

# the text, and where the two bytes that seldom come together in JSON lie in it (looked for first)
_NEEDLES = ((b'"M"', 1), (b"ProfilerStep#", 11), (b"Iteration Time", 9), (b'"Reduce"', 0))
_OVERLAP = max(len(text) for text, _ in _NEEDLES) - 1  # a needle across two chunks is found in the second
_CHUNK = 4 << 20
_MOST_HITS = 10_000  # past this many, looking each one up costs more than scanning the file
_WINDOWS = (1 << 11, 1 << 15, 1 << 20)  # bytes either side of a hit within which its event is looked for
_TRIES = 8  # starts and ends of the event tried, nearest first
_START = re.compile(rb"[\[,][ \t\n\r]*\{")  # where an event may begin (its "{" ends the match)
_END = re.compile(rb"\}[ \t\n\r]*[,\]]")  # where one may end (its "}" begins the match)


def names_and_steps(path: Path) -> tuple[list[Event], list[Event]] | None:
    """The file's metadata events and possible steps, each in file order, as the first pass would
    sort them out; None where the text does not tell (too many hits, an event not found around
    one, a processor without AVX2, where looking is slower than scanning)."""
    if not WIDE_SEARCH:
        return None
    starts: dict[int, list[Event] | RawEvents] = {}  # the events around the hits, by where they begin
    names: list[Event] = []
    steps: list[Event] = []
    found = _hits(path)
    if found is None:
        return None
    with open(path, "rb") as f:
        for at in found:
            event = _around(f.fileno(), at)
            if event is None:
                return None
            starts.setdefault(*event)
    for _, events in sorted(starts.items()):
        are_names, are_steps = steps_and_names(events, 0)
        names += are_names
        steps += [event for _, event in are_steps]
    return names, steps


def _hits(path: Path) -> list[int] | None:
    """Where the needles lie in the file, in order; None if there are too many."""
    hits: set[int] = set()
    buf = bytearray(_OVERLAP + _CHUNK)  # read into, not a new bytes a chunk
    view = memoryview(buf)
    base, kept = 0, 0  # where buf starts in the file; the bytes of the chunk before kept at its start
    with open(path, "rb", buffering=0) as f:
        while read := f.readinto(view[kept:]):
            end = kept + read
            found = found_at(view[:end], _NEEDLES, base, _MOST_HITS)
            if found is None:
                return None
            hits.update(found)
            if len(hits) > _MOST_HITS:
                return None
            kept = min(_OVERLAP, end)
            buf[:kept] = bytes(view[end - kept:end])  # a copy: the two may overlap in a short file
            base += end - kept
    return sorted(hits)


def _around(fd: int, at: int) -> tuple[int, list[Event] | RawEvents] | None:
    """The event whose text holds byte ``at``: where it begins, and it as a batch of one event;
    None if none is found."""
    for window in _WINDOWS:
        low = max(0, at - window)
        text = os.pread(fd, 2 * window, low)
        hit = at - low
        begins = [m.end() - 1 for m in _START.finditer(text, 0, hit + 1)][::-1][:_TRIES]
        ends = [m.start() + 1 for m in _END.finditer(text, hit)][:_TRIES]
        for begin in begins:
            for end in ends:
                try:
                    events = _decode(b"".join((b"[", text[begin:end], b"]")))
                except (msgspec.DecodeError, RecursionError):
                    continue
                if len(events) == 1:
                    return low + begin, events
    return None


_EVENTS = msgspec.json.Decoder(list[Event])
_EVENT = msgspec.json.Decoder(Event)
_VALUE = msgspec.json.Decoder()


def _decode(data: bytes) -> list[Event] | RawEvents:
    """A batch's events as ``events.batches`` decodes a plain one (msgspec's errors for any
    other)."""
    scanned = scan(data, _EVENT.decode, _VALUE.decode)
    return _EVENTS.decode(data) if scanned is None else scanned


def keys(events: Iterable[Event]) -> list[str]:
    """Events as text that tells any two apart (1, 1.0 and True too): two passes' finds compared."""
    return [repr((e.ph, e.name, e.pid, e.tid, e.ts, e.dur, e.cat, e.id, bytes(e.args))) for e in events]
