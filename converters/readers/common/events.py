"""The Chrome-trace event as the readers of such files decode it: ``chrome_trace``, and the
dialects that subclass its ``Dialect`` (``kineto``, ``paddle``, which make events of their own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import orjson

from ...errors import Diagnostics
from .._core import RawEvents, scan
from . import jsonfile

_Scalar = int | float | str | None


class Event(msgspec.Struct):
    """The fields of a Chrome-trace event the readers use; ``args`` stays undecoded JSON (an
    event whose args are no object is left out as it becomes a record, in C and in Python: see
    ``chrome_trace.Records``). Those that name and route an event are numbers or text: an event
    with an array or object there is no event (``chrome_trace`` leaves it out as it reads a
    batch); ``ts`` and ``dur`` are read by ``times.us_to_ns``, which says what it cannot read."""

    ph: _Scalar = ""
    name: _Scalar = ""
    pid: _Scalar = None
    tid: _Scalar = None
    ts: Any = None
    dur: Any = 0
    cat: _Scalar = None
    id: _Scalar = None
    args: msgspec.Raw = msgspec.Raw(b"")


def is_profiler_step(name: Any) -> bool:
    """torch_npu's and PyTorch's ``ProfilerStep#N`` (a prefix test first: this runs on every
    event of a file)."""
    return type(name) is str and name.startswith("ProfilerStep#") and name[13:].isdecimal()


EVENTS = msgspec.json.Decoder(list[Event])  # a batch of events, as far as ``Event`` reads them
EVENT = msgspec.json.Decoder(Event)  # one event
_EACH = msgspec.json.Decoder(list[msgspec.Raw])  # a batch's events, each one's own text
ANY = msgspec.json.Decoder()  # any JSON


class Scanning(NamedTuple):
    """How ``_core.scan`` reads a batch as a dialect's decoder decodes it: one event (an event
    Python reads is this one's), one field's value, and ts's and dur's (None: as any value's)."""

    event: Callable[[bytes], Event]
    value: Callable[[bytes], Any]
    time: Callable[[bytes], Any] | None = None


PLAIN = Scanning(EVENT.decode, ANY.decode)  # as ``EVENTS`` decodes a batch
# as a dialect that reads a float as its text decodes a batch (Kineto's and Paddle's ``events``): ts and
# dur with float_hook=str, read exactly by us_to_ns; the other fields as Event types them (the hook is
# for Any fields)
FLOATS_AS_TEXT = Scanning(msgspec.json.Decoder(Event, float_hook=str).decode, ANY.decode,
                          msgspec.json.Decoder(float_hook=str).decode)


def batches(path: Path, diag: Diagnostics, events: msgspec.json.Decoder,
            batch_bytes: int, *, scanned: Scanning | None = None) -> Iterator[list[Event] | RawEvents]:
    """The file's events in batches of about ``batch_bytes``, with memory bounded by it: in Ascend's dialect
    (and a dialect's that says how: ``scanned``) scanned in C (``_core.scan``: where each event's fields
    lie, objects made only for what is kept), else decoded only as far as ``Event`` needs (3x faster
    than decoding all of it). A
    batch ``scan`` finds out of the ordinary (escaped keys, a key twice, huge numbers) is decoded.

    Anything unusual (cut off, a bad event) takes the careful path of ``jsonfile``, which
    recovers what can be recovered and says where the problem is. A batch that is JSON but holds
    an event that is not one as ``Event`` types it (a pid that is an array or past a double,
    nesting deeper than msgspec decodes) is read event by event, those events left out with a
    warning.

    ``scanned``: scan a plain batch though ``events`` is a dialect's decoder, as that decoder decodes
    it (a ``Scanning`` of the same types and hooks: Kineto's).
    """
    scanning = scanned if scanned is not None else PLAIN if events is EVENTS else None

    def decode(data: bytes) -> list[Event] | RawEvents | list[Any]:
        if scanning is not None and (raw := scan(data, *scanning)) is not None:
            return raw
        try:
            return events.decode(data)
        except (msgspec.ValidationError, RecursionError):
            pass
        except msgspec.DecodeError as e:
            raise ValueError(str(e)) from None
        try:  # then event by event, below: each one's text (any numbers), or as orjson decodes it
            return _EACH.decode(data)
        except RecursionError:
            pass
        except msgspec.DecodeError as e:
            raise ValueError(str(e)) from None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise ValueError(str(e)) from None

    def one(item: Any) -> Event:
        if type(item) is msgspec.Raw:
            return events.decode(b"".join((b"[", item, b"]")))[0]  # the dialect's types and hooks
        return msgspec.convert(raw_args(item), Event)

    seen = 0
    for batch in jsonfile.iter_batches(path, diag, decode, batch_bytes):
        if type(batch) is RawEvents or (batch and type(batch[0]) is Event):
            seen += len(batch)
            yield batch
            continue
        decoded = []
        for index, item in enumerate(batch, seen):
            try:
                decoded.append(one(item))
            except (msgspec.ValidationError, TypeError, ValueError, RecursionError) as e:
                diag.warn("bad_event", f"{path}: event {index}: expected a trace event: an object whose ph, "
                          f"name, pid, tid, cat and id are numbers or text and whose args are an object "
                          f"({str(e)[:80]}); skipped")
        seen += len(batch)
        yield decoded


def raw_args(event: Any) -> Any:
    """A decoded event with its args as undecoded JSON, as ``Event`` holds them (null: none).

    Raises:
        TypeError: its args are no object.
    """
    if isinstance(event, dict) and "args" in event:
        args = event["args"]
        if args is not None and type(args) is not dict:
            raise TypeError(f"args is a {type(args).__name__}")
        return {**event, "args": msgspec.Raw(b"" if args is None else msgspec.json.encode(args))}
    return event
