"""What it costs Perfetto's trace processor to load our detail trace, against the vendor's JSON of
the same events, and what other encodings of the same content would cost (issue 28).

    .venv/bin/python -m bench.tp_load [--runs 8] [--steps 27] [--profile DIR]

Generates a one-rank torch_npu profile (``trace_view.json`` of ~100 MB, as ``make bench``'s
torch_npu profile per rank), converts it in detail to .pftrace and .json, writes variants of the
.pftrace (the same content encoded otherwise, and some content left out to price it), and loads
each in round robin ``--runs`` times, printing the least and the median CPU seconds (user + system)
of a load (the trace processor: $TRACE2PERFETTO_TRACE_PROCESSOR, else shared/tools beside the
checkout). ``tests/tp_tables.py A B`` says whether two of them import the same. ``--profile DIR``:
a real profile instead (one rank of ``../shared/data/real``), its one trace file (Kineto's, or
torch_npu's ``trace_view.json``) the vendor's row.

Variants (each rewritten from our .pftrace, field by field):
- ``incremental-clock``: per sequence a ClockSnapshot declaring an incremental clock (id 64,
  ``is_incremental``) and TracePacketDefaults naming it: timestamps as deltas.
- ``track-sequences``: a sequence per track, its TracePacketDefaults naming the track (no uuid on
  the events) and the incremental clock; names and strings interned per new sequence.
- ``track-sequences-absolute``: the same with absolute timestamps and no clock.
- ``plain``: ``tests/tp_tables.plain``: every string where it is used, no sequence state.
- ``plain-sorted``: plain, its events in timestamp order (ties in file order).
- priced, not the same content: ``no-args`` (no debug annotation), ``no-args-no-flows``,
  ``no-ends`` (begins only), ``header`` (descriptors only: the start-up).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from converters.writers.perfetto import _int, _len

from .run import BUILD

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tp_tables import plain, trace_processor  # noqa: E402

_SEQ_CLOCK = 64  # the first sequence-scoped clock id
_BOOTTIME = 6
# TracePacket fields
_TIMESTAMP, _SEQ_ID, _TRACK_EVENT, _INTERNED, _FLAGS = 8, 10, 11, 12, 13
_CLOCKS, _DEFAULTS, _FIRST = 6, 59, 87
_SLICE_END = 2


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i




def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes, bytes]]:
    """(field, value, the field's bytes) of a message: varints as ints, the rest as bytes."""
    i = 0
    while i < len(buf):
        start = i
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        else:
            size = {1: 8, 5: 4}.get(wire)
            if size is None:
                size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        yield key >> 3, value, buf[start:i]


def _packets(data: bytes) -> Iterator[dict[int, int | bytes]]:
    for _, packet, _ in _fields(data):
        yield {field: value for field, value, _ in _fields(packet)} | {0: packet}


def _without(event_fields: set[int], drop_ends: bool = False) -> Callable[[bytes], bytes]:
    """Our trace less some TrackEvent fields (4: args, 47/48: flows), or less its slice ends."""
    def rewrite(data: bytes) -> bytes:
        out = bytearray()
        for packet in _packets(data):
            event = packet.get(_TRACK_EVENT)
            if event is None:
                out += _len(1, packet[0])
                continue
            kept = [raw for field, value, raw in _fields(event) if field not in event_fields]
            if drop_ends and any(f == 9 and v == _SLICE_END for f, v, _ in _fields(event)):
                continue
            rest = b"".join(raw for field, _, raw in _fields(packet[0]) if field != _TRACK_EVENT)
            out += _len(1, _len(_TRACK_EVENT, b"".join(kept)) + rest)
        return bytes(out)
    return rewrite


def _header(data: bytes) -> bytes:
    return b"".join(_len(1, p[0]) for p in _packets(data) if _TRACK_EVENT not in p)


def _clock_start(sequence: int, ts: int, track: int | None, incremental: bool) -> bytes:
    """The packets that open a rewritten sequence: cleared state, the clock, the defaults."""
    defaults = _len(11, _int(11, track)) if track is not None else b""  # TrackEventDefaults.track_uuid
    opening = _int(_SEQ_ID, sequence) + _int(_FLAGS, 1) + _int(_FIRST, 1)
    if not incremental:
        return _len(1, _len(_DEFAULTS, defaults) + opening)
    clocks = (_len(1, _int(1, _BOOTTIME) + _int(2, ts))
              + _len(1, _int(1, _SEQ_CLOCK) + _int(2, ts) + _int(3, 1)))
    return (_len(1, _len(_CLOCKS, clocks) + opening)
            + _len(1, _len(_DEFAULTS, defaults + _int(58, _SEQ_CLOCK)) + _int(_SEQ_ID, sequence)))


def _incremental(data: bytes) -> bytes:
    """Our trace, its timestamps deltas on an incremental clock per sequence."""
    out, last = bytearray(), {}
    for packet in _packets(data):
        sequence, ts = packet.get(_SEQ_ID), packet.get(_TIMESTAMP)
        if _TRACK_EVENT not in packet:
            out += _len(1, packet[0])
            continue
        if sequence not in last:
            out += _clock_start(sequence, ts, None, True)
            last[sequence] = ts
        rest = b"".join(raw for field, _, raw in _fields(packet[0]) if field != _TIMESTAMP)
        out += _len(1, _int(_TIMESTAMP, ts - last[sequence]) + rest)
        last[sequence] = ts
    return bytes(out)


def _track_sequences(incremental: bool) -> Callable[[bytes], bytes]:
    """Our trace on a sequence per track, the track a default, strings interned per sequence."""
    def rewrite(data: bytes) -> bytes:
        flat = plain(data)
        out, sequences, last, tables = bytearray(), {}, {}, {}
        for packet in _packets(flat):
            event = packet.get(_TRACK_EVENT)
            if event is None:
                out += _len(1, packet[0])
                continue
            ts, track = packet[_TIMESTAMP], next(v for f, v, _ in _fields(event) if f == 11)
            if track not in sequences:
                sequences[track] = 60000 + len(sequences)
                out += _clock_start(sequences[track], ts, track, incremental)
                last[track], tables[track] = ts, {}
            defined: list[bytes] = []

            def iid(table: int, text: bytes, track: int = track, defined: list[bytes] = defined) -> int:
                known = tables[track].setdefault(table, {})
                if text not in known:
                    known[text] = len(known) + 1
                    defined.append(_len(table, _int(1, known[text]) + _len(2, text)))
                return known[text]

            body = bytearray()
            for field, value, raw in _fields(event):
                if field == 23:  # name -> name_iid
                    body += _int(10, iid(2, value))
                elif field == 4:  # DebugAnnotation: name -> name_iid, string_value -> string_value_iid
                    annotation = b"".join(_int(1, iid(3, v)) if f == 10 else _int(17, iid(29, v)) if f == 6
                                          else r for f, v, r in _fields(value))
                    body += _len(4, annotation)
                elif field != 11:
                    body += raw
            stamp = ts - last[track] if incremental else ts
            last[track] = ts
            out += _len(1, _int(_TIMESTAMP, stamp) + _len(_TRACK_EVENT, bytes(body))
                        + (_len(_INTERNED, b"".join(defined)) if defined else b"")
                        + _int(_SEQ_ID, sequences[track]))
        return bytes(out)
    return rewrite


def _sorted(data: bytes) -> bytes:
    """The plain form, its events in timestamp order (ties in file order), descriptors first."""
    head, events = bytearray(), []
    for index, packet in enumerate(_packets(plain(data))):
        if _TRACK_EVENT in packet:
            events.append((packet[_TIMESTAMP], index, packet[0]))
        else:
            head += _len(1, packet[0])
    events.sort(key=lambda e: e[:2])
    return bytes(head) + b"".join(_len(1, e[2]) for e in events)


VARIANTS: dict[str, Callable[[bytes], bytes]] = {
    "incremental-clock": _incremental,
    "track-sequences": _track_sequences(incremental=True),
    "track-sequences-absolute": _track_sequences(incremental=False),
    "plain": plain,
    "plain-sorted": _sorted,
    "no-args": _without({4}),
    "no-args-no-flows": _without({4, 47, 48}),
    "no-ends": _without(set(), drop_ends=True),
    "header": _header,
}


def load_cpu(trace: Path, query: Path) -> float:
    """CPU seconds (user + system) of one load of ``trace`` by the trace processor."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([str(trace_processor()), "-q", str(query), str(trace)], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=27)
    parser.add_argument("--profile", type=Path, help="a real profile (one rank) instead of a generated one")
    args = parser.parse_args()
    from fixtures.ascend_pt_gen import write_ascend_pt_profile

    work = BUILD / (f"tp-load-{args.profile.name}" if args.profile else f"tp-load-{args.steps}")
    root = args.profile or work / "profile"
    work.mkdir(parents=True, exist_ok=True)
    if not root.exists():
        write_ascend_pt_profile(root, ranks=1, steps=args.steps, tasks_per_step=1000, planes=8, seed=1,
                                with_kernel_details=False)
    raw = [p for pattern in ("trace_view.json", "*.json.gz", "*.pt.trace.json")
           for p in sorted(root.rglob(pattern))]
    traces = {f"vendor {raw[0].name}": raw[0]} if len(raw) == 1 else {}
    for suffix in ("json", "pftrace"):
        out = traces[f"ours .{suffix}"] = work / f"detail.{suffix}"
        subprocess.run([sys.executable, "-m", "converters", str(root), "--kind", "detail", "--max-size", "0",
                        "-o", str(out)], check=True, stderr=subprocess.DEVNULL)
    ours = traces["ours .pftrace"].read_bytes()
    for name, rewrite in VARIANTS.items():
        path = traces[name] = work / f"{name}.pftrace"
        path.write_bytes(rewrite(ours))
    query = work / "count.sql"
    query.write_text("select count(*) from slice;\n")
    times: dict[str, list[float]] = {name: [] for name in traces}
    for _ in range(args.runs):
        for name, path in traces.items():
            times[name].append(load_cpu(path, query))
    vendor = min(next(iter(times.values())))  # the vendor's file, else our .json
    print(f"| trace | MB | CPU s (least of {args.runs}) | median | x {next(iter(times))} |\n"
          "|---|---:|---:|---:|---:|")
    for name, path in traces.items():
        least = min(times[name])
        median = statistics.median(times[name])
        size_mb = os.path.getsize(path) / 1e6
        print(f"| {name} | {size_mb:.1f} | {least:.3f} | {median:.3f} | {least / vendor:.2f} |")


if __name__ == "__main__":
    main()
