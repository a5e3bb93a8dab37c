"""Reading a Chrome-trace JSON array in batches, with memory bounded by the batch size.

Profilers write traces of hundreds of MB on one line; ``orjson.loads`` of the whole file holds
the bytes and all the events at once (~10x the file). This reader keeps one chunk of bytes and
one batch of events, and still does all the parsing in orjson, never scanning bytes in Python:

1. Read ~``chunk_bytes`` onto the leftover of the previous round. The buffer always starts with
   ``[`` (the real one, or a ``[`` written over the comma the previous round stopped at).
2. Find the last ``}  ,  {`` in the buffer with a regex: it is likely the boundary between the
   last two whole events (for items that are not objects, try the last commas instead). It
   may lie in a string or a nested list of objects, so check it:
   the text after it must be the start of a JSON value (orjson, on the short tail, must run out
   of data rather than fail), then the text before it plus ``]`` must decode in one orjson call.
   A false candidate costs one failed call; after a few, or when there is no candidate (items
   that are not objects, an event longer than the buffer), a slow but exact scan finds the item
   boundaries with the stdlib's C scanner and orjson decodes them.
3. No boundary in the buffer: double the read and try again (an event larger than a chunk).

The orjson error tells a false candidate (it runs out of data where we cut) from garbage (it
fails before), so garbage raises ``InputError`` with the byte offset orjson reports.

At the end of the file: a closed array ends the stream (whitespace may follow an array; what
follows the events array of ``{"traceEvents": [...], ...}`` is not read). An array that is not
closed is a cut-off file, if the cut-off part is the start of valid JSON: its whole items are
yielded and one ``truncated_file`` warning names the file and the offsets. A cut just after an
event's ``}`` still warns (the array is not closed), and a trailing number is dropped, as it may
be the first digits of a longer one.

Limits: the ``traceEvents`` key is found by a regex over at most the first ``_MAX_HEADER`` bytes;
what follows the events array of an object is neither read nor checked; a duplicate top-level
``traceEvents`` key is not seen (orjson would keep the last).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ..errors import Diagnostics, InputError

_SPLIT = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")  # likely boundary between two events
_KEY = re.compile(rb'"traceEvents"[ \t\n\r]*(?::[ \t\n\r]*(\[)?)?')
_NON_WS = re.compile(rb"[^ \t\n\r]")
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_constant=lambda name: float(f"not {name}"))  # as orjson: no NaN
_WINDOW = 64 << 10  # the tail searched first for candidate boundaries
_MAX_CANDIDATES, _MAX_DECODES = 16, 3  # then fall back to the exact scan
_MAX_HEADER = 64 << 20  # bytes scanned for the "traceEvents" key of an object
_OPEN, _CLOSE = ord("["), ord("]")


def iter_event_batches(path: Path, diag: Diagnostics, *, chunk_bytes: int = 4 << 20) -> Iterator[list[Any]]:
    """Yield the file's top-level array items (events) in file order, in batches, reading about chunk_bytes at a time.

    The file is a JSON array, or an object whose ``traceEvents`` key holds the array.

    Raises:
        InputError: the file cannot be read, is empty, or is not valid JSON (``where`` is
            ``byte N``, counted from the start of the file).
    """
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 -- closed by the with below
    except OSError as e:
        raise InputError(path, "", f"cannot read: {e.strerror or e}") from e
    with f:
        reader = _Reader(path, f, max(1, chunk_bytes))
        try:
            yield from reader.batches(diag)
        except _Error as e:
            raise InputError(path, f"byte {reader.base + e.at}", f"not valid JSON ({e.msg})") from None


class _Error(Exception):
    """orjson failed on '[' + part of the buffer: ``kind`` is eof (it ran out of data), after
    (content after the closed array) or bad; ``at`` is the buffer index of the failure."""

    def __init__(self, kind: str, at: int, msg: str) -> None:
        self.kind, self.at, self.msg = kind, at, msg


class _Reader:
    def __init__(self, path: Path, f: BinaryIO, chunk: int) -> None:
        self.path, self.f, self.chunk = path, f, chunk
        self.buf = bytearray()  # buf[0] is the '[' (or a '[' written over the comma) before the next item
        self.base = 0  # file offset of buf[0]
        self.eof = False
        self.wrapped = False  # the array is the traceEvents of an object
        self.after_comma = False  # buf[0] replaced a comma, so a ']' right after it is an error
        self.count = 0

    def batches(self, diag: Diagnostics) -> Iterator[list[Any]]:
        self._start()
        while not self.eof:
            split = self._split()
            if split is None:  # no whole item yet: read as much again
                self._read(max(self.chunk, len(self.buf)))
                continue
            items, c, closed = split
            self.count += len(items)
            if items:
                yield items
            if closed:
                self._check_rest(c)
                return
            self._drop(c - 1)  # keep the next item, with a '[' over the byte before it
            self.buf[0] = _OPEN
            self.after_comma = True
            self._read(self.chunk)
        yield from self._finish(diag)

    # -- input -------------------------------------------------------------------------

    def _read(self, n: int) -> None:
        try:
            data = self.f.read(n)
        except OSError as e:
            raise InputError(self.path, "", f"cannot read: {e.strerror or e}") from e
        if data:
            self.buf += data
        else:
            self.eof = True

    def _drop(self, n: int) -> None:
        del self.buf[:n]  # O(1): a bytearray moves its start
        self.base += n

    def _fail(self, at: int, reason: str) -> InputError:
        return InputError(self.path, f"byte {self.base + at}", reason)

    def _start(self) -> None:
        """Skip leading whitespace and leave buf[0] at the '[' that opens the events."""
        while (m := _NON_WS.search(self.buf)) is None:
            self._drop(len(self.buf))
            self._read(self.chunk)
            if self.eof:
                raise InputError(self.path, "byte 0", "empty file, expected a JSON array of trace events")
        self._drop(m.start())
        if self.buf[0] == ord("{"):
            self._find_trace_events()
        elif self.buf[0] != _OPEN:
            raise self._fail(0, "expected a JSON array of trace events")

    def _find_trace_events(self) -> None:
        """Find the top-level "traceEvents": [ by regex, checking that what precedes it closes
        as an object; reads at most _MAX_HEADER bytes."""
        scan = 0
        while True:
            m = _KEY.search(self.buf, scan)
            if m and m.group(1):
                bracket = m.end() - 1
                try:
                    orjson.loads(bytes(self.buf[:bracket]) + b"0}")
                except orjson.JSONDecodeError:
                    scan = m.end()  # in a string or a nested object
                    continue
                self._drop(bracket)
                self.wrapped = True
                return
            if m and m.end() < len(self.buf):
                scan = m.end()  # "traceEvents" followed by something else
                continue
            scan = m.start() if m else max(scan, len(self.buf) - 12)
            if self.eof or len(self.buf) > _MAX_HEADER:
                break
            self._read(self.chunk)
        try:
            orjson.loads(self.buf)
        except orjson.JSONDecodeError as e:
            kind, at = _classify(e, self.buf)
            if kind == "bad":
                raise self._fail(at, f"not valid JSON ({e.msg})") from None
            if self.eof:
                raise self._fail(len(self.buf), "cut off before the traceEvents array") from None
            raise InputError(self.path, "top level", f"no traceEvents array in the first {_MAX_HEADER >> 20} MiB") from None
        raise InputError(self.path, "top level", "expected a JSON array of trace events")

    # -- decoding ------------------------------------------------------------------------

    def _loads(self, lo: int, hi: int, close: bool) -> list[Any]:
        """orjson.loads of '[' + buf[lo:hi] (+ ']'), written in place over buf[lo-1] and buf[hi]."""
        buf, saved, saved_hi = self.buf, self.buf[lo - 1], -1
        buf[lo - 1] = _OPEN
        if close:
            if hi == len(buf):
                buf.append(_CLOSE)
            else:
                saved_hi, buf[hi] = buf[hi], _CLOSE
        try:
            with memoryview(buf) as view, view[lo - 1 : hi + close] as data:
                try:
                    return orjson.loads(data)
                except orjson.JSONDecodeError as e:
                    kind, at, msg = *_classify(e, data), e.msg
            raise _Error(kind, lo - 1 + at, msg)
        finally:
            buf[lo - 1] = saved
            if close and saved_hi < 0:
                buf.pop()
            elif close:
                buf[hi] = saved_hi

    def _split(self) -> tuple[list[Any], int, bool] | None:
        """Decode the whole items at the start of the buffer: (items, start of the rest,
        whether the array closed), or None when there is no whole item yet."""
        buf, n = self.buf, len(self.buf)
        lo = max(1, n - _WINDOW)
        found = list(_SPLIT.finditer(buf, lo))[::-1]
        if len(found) < _MAX_CANDIDATES:  # also look further back (huge or unusual events)
            found += [m for m in _SPLIT.finditer(buf, 1, min(n, lo + 4096)) if m.start() < lo][::-1]
        # (the last byte of an item, the first of the next): '}' and '{' of a match, else around a comma
        candidates = [(m.start(), m.end() - 1) for m in found[:_MAX_CANDIDATES]]
        comma = n
        for _ in range(_MAX_CANDIDATES // 2):  # items that are not objects
            if (comma := buf.rfind(b",", 1, comma)) < 0:
                break
            candidates.append((comma - 1, comma + 1))
        decodes, budget = 0, 2 * n  # bytes of tails to look at: an event may be longer than a chunk
        for b, c in candidates:
            budget -= n - c
            if budget < 0:
                break
            try:  # what follows must be the start of a JSON value (a quick look at the short tail)
                self._loads(c, n, close=False)
            except _Error as e:
                if e.kind != "eof":
                    continue
            try:
                return self._loads(1, b + 1, close=True), c, False
            except _Error as e:
                if e.kind == "after":
                    return self._closed(e.at)
                if e.kind == "bad" and e.at <= b:  # not just the ']' we added: garbage
                    raise
            decodes += 1
            if decodes == _MAX_DECODES:
                break
        return self._scan()

    def _closed(self, at: int) -> tuple[list[Any], int, bool]:
        """orjson found content after the array's ']' at buf[at]: the events end before it."""
        if not self.wrapped:
            raise self._fail(at, "unexpected content after the array of trace events")
        items = self._loads(1, at, close=False)
        if self.after_comma and not items:
            raise self._fail(0, "not valid JSON (trailing comma is not allowed)")
        return items, at, True

    def _scan(self) -> tuple[list[Any], int, bool] | None:
        """The exact, slow path: walk the items with the stdlib's C scanner (a latin-1 str has
        one character per byte), then decode them with orjson."""
        text = self.buf.decode("latin-1")
        n, pos, last = len(text), 1, None  # last: (end of the last item before a ',', start of the next)
        while True:
            pos = _WS.match(text, pos).end()
            if pos == n:
                break
            if text[pos] == "]" and last is None:
                if self.after_comma:
                    raise self._fail(0, "not valid JSON (trailing comma is not allowed)")
                return [], pos + 1, True
            try:
                end = _DECODER.raw_decode(text, pos)[1]
                after = _WS.match(text, end).end()
                sep = text[after : after + 1]
            except (ValueError, RecursionError):
                sep = ""
            if sep == ",":
                last, pos = (end, after + 1), after + 1
            elif sep == "]":
                return self._loads(1, after + 1, close=False), after + 1, True
            else:  # cut off by the end of the buffer (maybe mid-number), or garbage: orjson decides
                try:
                    self._loads(pos, n, close=False)
                except _Error as e:
                    if e.kind != "eof":
                        raise
                break
        if last is None:
            return None
        return self._loads(1, last[0], close=True), last[1], False

    # -- the end -------------------------------------------------------------------------

    def _finish(self, diag: Diagnostics) -> Iterator[list[Any]]:
        """At the end of the file: the last items, and the warning for a cut-off array."""
        n, size, truncated = len(self.buf), self.base + len(self.buf), False
        try:
            items = self._loads(1, n, close=False)
            if self.after_comma and not items:
                raise self._fail(0, "not valid JSON (trailing comma is not allowed)")
        except _Error as e:
            if e.kind == "bad":
                raise
            if e.kind == "after":
                items = self._closed(e.at)[0]
            else:
                items, truncated = self._recover(), True
        self.count += len(items)
        if truncated:  # warn before the last yield: the caller may stop after it
            diag.warn(
                "truncated_file",
                f"{self.path}: cut off at byte {size}; converted the {self.count} whole events before it",
            )
        if items:
            yield items

    def _recover(self) -> list[Any]:
        """The whole items of a buffer cut off by the end of the file."""
        items: list[Any] = []
        split = self._scan()  # the items followed by a comma; raises on garbage
        if split is not None and not split[2]:
            items = split[0]
            self._drop(split[1] - 1)
            self.buf[0] = _OPEN
        tail = self.buf[1:].rstrip(b" \t\n\r")  # at most one item, whole or cut off
        if tail:
            try:
                last = self._loads(1, 1 + len(tail), close=True)
            except _Error:
                try:  # it must be the start of a JSON value
                    self._loads(1, len(self.buf), close=False)
                except _Error as e:
                    if e.kind != "eof":
                        raise
            else:
                if tail[-1:] not in b"0123456789":  # a number may be the start of a longer one
                    items += last
        return items

    def _check_rest(self, c: int) -> None:
        """After the array closed before buf[c]: an array may be followed by whitespace only."""
        if self.wrapped:
            return
        self._drop(c)
        while True:
            if m := _NON_WS.search(self.buf):
                raise self._fail(m.start(), "unexpected content after the array of trace events")
            self._drop(len(self.buf))
            self._read(self.chunk)
            if self.eof:
                return


def _classify(e: orjson.JSONDecodeError, data: memoryview | bytearray) -> tuple[str, int]:
    """The kind of an orjson error and its byte index in data (orjson counts characters)."""
    if "UTF-8" in e.msg:  # orjson checks the encoding first and reports position 0
        try:
            bytes(data).decode("utf-8")
        except UnicodeDecodeError as u:
            return ("eof" if u.reason == "unexpected end of data" else "bad"), u.start
        return "bad", 0
    at = len(e.doc[: e.pos].encode("utf-8", "surrogatepass"))
    if e.msg.startswith("unexpected end of data"):
        return "eof", at
    if e.msg.startswith("unexpected content after document"):
        return "after", at
    return "bad", at
