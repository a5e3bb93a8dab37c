"""The Chrome JSON writer's C loop writes the bytes orjson writes for the same records: the
reference below is the writer as it was in Python, one dict and one ``orjson.dumps`` per record.
And whatever the times and the origin it is given, what Perfetto reads back from the text is
every time to the ns (to the µs, rounded down, past 10**15 ns from the origin), none before 0."""

from __future__ import annotations

import json
import math
import re
from itertools import pairwise
from pathlib import Path

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from converters.layout import Begin, End, Track, Value
from converters.model import TIME_LIMIT_NS, Layer, RankInfo, Slice
from converters.writers.chrome_json import (
    _SEPARATOR,
    ORIGIN_MARGIN_NS,
    ChromeJsonEncoder,
    Origins,
    own_origin,
)


def held(ns: int) -> int:
    """Past 10**15 ns from the origin, times go out to the µs, rounded down."""
    return ns if ns < 10**15 else ns // 1000 * 1000


def series(lane: str) -> tuple[str, str]:
    """A counter lane as a C event's name and arg key: the trace processor names the series
    "<name> <key>", the lane again where it is split at its last space; without one, "value"."""
    name, space, key = lane.rpartition(" ")
    return (name, key) if name else (lane, "value")


def reference_counters(values: list[Value], origin: int) -> bytes:
    """The chunk's values as C events: one event for the values at one time of one rank's lanes of
    one name, the k-th value of each lane at that time with the k-th of the others (never a key
    twice, at most 64), by name (in the order of each one's first value), time, k and input order."""
    groups: dict[tuple[int, str], int] = {}
    lanes: dict[Track, int] = {}
    seen: dict[tuple[Track, int], int] = {}
    order = []
    for at, v in enumerate(values):
        name, key = series(v.track.lane)
        if v.track not in lanes:
            lanes[v.track] = groups.setdefault((v.track.rank, name), len(lanes))
        nth = seen[v.track, v.ts_ns] = seen.get((v.track, v.ts_ns), -1) + 1
        order.append((lanes[v.track], v.ts_ns, nth, at, name, key, v))
    events: list[tuple[tuple, dict]] = []
    for group, ts, nth, _, name, key, v in sorted(order, key=lambda o: o[:4]):
        if events and events[-1][0] == (group, ts, nth) and key not in events[-1][1]["args"] \
                and len(events[-1][1]["args"]) < 64:
            events[-1][1]["args"][key] = v.value
            continue
        events.append(((group, ts, nth), {"ph": "C", "pid": v.track.rank + 1, "name": name,
                                          "ts": held(ts - origin) / 1000, "args": {key: v.value}}))
    return b"".join(_SEPARATOR + orjson.dumps(record) for _, record in events)


_STRING_OR_SPACE = re.compile(rb'("(?:[^"\\]|\\.)*")|[ \t\n\r]+')


def compact(raw: bytes) -> bytes:
    """Raw JSON args less the white space outside their strings (Kineto indents its args over lines)."""
    return _STRING_OR_SPACE.sub(lambda m: m[1] or b"", raw)


def reference_chunk(encoder: ChromeJsonEncoder, sequence: int, events: list) -> bytes:
    out = bytearray()
    origin = encoder.origin_ns
    named = encoder._named.setdefault(sequence, set())
    for event in events:
        if type(event) is not Begin:
            continue
        s, track = event.slice, event.track
        tid, naming = encoder._tid(track, named)
        out += naming
        start, end = held(s.start_ns - origin), held(s.start_ns - origin + s.dur_ns)
        record = {"ph": "X", "pid": track.rank + 1, "tid": tid, "name": s.name, "ts": start / 1000,
                  "dur": held(end - start) / 1000}
        if s.args:
            record["args"] = s.args if type(s.args) is dict else orjson.Fragment(compact(bytes(s.args)))
        out += _SEPARATOR
        out += orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)
        # an arrow's end to the µs (past 10**15 ns) a µs into a slice of 2 µs or more: after its start
        into = start + 1000 if start >= 10**15 and held(end - start) >= 2000 else start
        for phase, flows, at in (("s", s.flows_out, start), ("f", s.flows_in, into)):
            base = {"pid": record["pid"], "tid": record["tid"], "ts": at / 1000, "cat": "flow",
                    "name": "flow"}
            for flow in flows:
                out += _SEPARATOR
                out += orjson.dumps({"ph": phase, "id": f"{flow:x}", "bp": "e", **base})
    return bytes(out) + reference_counters([e for e in events if type(e) is Value], origin)


# counter lanes: without a space (key "value"), the same text twice, two of one name, one name on
# two ranks, spaces at the ends
tracks = st.sampled_from([Track(0, "Ascend Hardware", 2, "Stream 2", 5), Track(0, "CANN", 4, "Thread 7", 1),
                          Track(3, "HCCL", 3, "Group 0 Communication", 0),
                          Track(1, "Counters", 9, "HBM", 0, "bytes"),
                          Track(1, "Counters", 9, "HBM", 1, "bytes"),
                          Track(1, "Counters", 9, "read [value]", 2, ""),
                          Track(1, "Counters", 9, "read [acc_id]", 3, ""),
                          Track(0, "Counters", 9, "read [value]", 2, ""),
                          Track(1, "Memory", 8, "read [value]", 0, ""),
                          Track(1, "Counters", 9, " lead", 4, ""), Track(1, "Counters", 9, "trail ", 5, "")])
times = st.one_of(st.integers(-10**6, 10**16), st.integers(-TIME_LIMIT_NS + 1, TIME_LIMIT_NS - 1),
                  st.sampled_from([0, 999, 10**15 - 1, 10**15, -(10**15)]))  # within the model's bounds
raw_args = st.one_of(
    st.sampled_from([b'{"Task Type":"AI_CORE"}', b'{ "a" : [1, 2.50] }', b"", b"[]", b'"x"',
                     b'{\n      "Device Type": 0, "Device Id": -1, "Bytes": 4\n    }',  # Kineto 1.8's
                     b'{"Task Type": "AI CORE", "s": "a \\" b \\\\", "t": "\\\\"}', b'\t[ ]\r\n']),
    st.tuples(st.recursive(st.none() | st.booleans() | st.integers()
                           | st.floats(allow_nan=False, allow_infinity=False) | st.text(" \"\\a\n\t"),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(" \"\\k"), inner, max_size=3), max_leaves=6),
              st.sampled_from([None, 0, 2, "\t", " \r\n"]),
              ).map(lambda v: json.dumps(v[0], indent=v[1]).encode()))
int64 = st.integers(-(2**63), 2**63 - 1)  # orjson's ints
dict_args = st.dictionaries(st.one_of(st.text(max_size=5), int64), st.one_of(int64, st.text()), max_size=3)
flows = st.lists(st.integers(0, 2**64 - 1), max_size=2).map(tuple)
slices = st.builds(
    lambda name, start, dur, args, flows_out, flows_in: Slice(0, Layer.STREAM, "Stream 2", name, start, dur,
                                                              args, "", flows_out, flows_in),
    st.text(), times, st.integers(0, 10**16), st.one_of(st.none(), raw_args, dict_args), flows, flows)
# counter values: ints (to 2**64 - 1, as orjson writes them), floats (written in C where Python's repr
# is orjson's text, from 1e-4 to 1e16; by orjson outside, NaN too) and bools
values = st.one_of(st.floats(), st.floats(-1e17, 1e17), st.floats(1e-6, 1e-3), int64,
                   st.integers(0, 2**64 - 1), st.booleans(),
                   st.sampled_from([0.0, -0.0, 1e-4, 1e-5, 1e16, 9999999999999998.0, 2**63]))
events = st.lists(st.one_of(st.builds(Begin, tracks, slices), st.builds(End, tracks, times),
                            st.builds(Value, tracks, times, values)), max_size=20)


def far_apart(start_ns: int, dur_ns: int) -> list[list[Begin | Value]]:
    """A chunk whose first event is at the model's earliest time and whose last slice starts at
    ``start_ns``: ~2**63 ns apart, past 64 bits from the origin before the first event."""
    track = Track(0, "Ascend Hardware", 2, "Stream 2", 5)
    zero = Begin(track, Slice(0, Layer.STREAM, "Stream 2", "", 0, 0, None, "", (), ()))
    last = Begin(track, Slice(0, Layer.STREAM, "Stream 2", "", start_ns, dur_ns, None, "", (1,), ()))
    return [[zero, zero, Value(track, -TIME_LIMIT_NS + 1, 0.0), last]]


@settings(max_examples=500, deadline=None)
@given(st.lists(events, min_size=1, max_size=3), st.one_of(st.none(), st.integers(0, 2**40)), st.booleans())
@example(far_apart(TIME_LIMIT_NS - 1, 0), None, True)  # its start from the whole hour before: past 64 bits
@example(far_apart(TIME_LIMIT_NS - 1, 10**16 - 1), None, False)  # its end from the origin: past 64 bits
def test_chunks_are_the_bytes_orjson_writes_for_each_record(chunks, origin, whole_hours):
    ours = ChromeJsonEncoder(origin, first_tid=3, whole_hours=whole_hours)
    reference = ChromeJsonEncoder(origin, first_tid=3)
    starts, ends = [], []
    for sequence, chunk in enumerate(chunks):
        written = ours.chunk(sequence % 2, chunk)
        if reference.origin_ns is None:  # a rank on its own clock: its first chunk sets the origin
            reference.origin_ns = own_origin(chunk, whole_hours)
        assert written == reference_chunk(reference, sequence % 2, chunk)
        orjson.loads(b"[0" + written + b"]")  # and it is JSON
        for event in chunk:  # and the span of the events placed is noted
            if type(event) is Begin:
                starts.append(event.slice.start_ns)
                ends.append(event.slice.start_ns + event.slice.dur_ns)
            elif type(event) is Value:
                starts.append(event.ts_ns)
                ends.append(event.ts_ns)
    assert ours.span == ((min(starts), max(ends)) if starts else None)


def test_a_counter_value_orjson_cannot_write_fails_as_orjson_does():
    track = Track(1, "Counters", 9, "HBM", 0, "bytes")
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(2**64)
    with pytest.raises(orjson.JSONEncodeError):
        ChromeJsonEncoder(0).chunk(0, [Value(track, 5, 2**64)])


def perfetto_ns(text: bytes) -> int:
    """A JSON ``ts`` or ``dur`` (µs) as Perfetto v58.2's importer reads it, in ns: an integer times
    1000; else the double int_part + fract_digits / 10**len(fract_digits)
    (src/trace_processor/util/json_parser.h StringToDouble), times 1000, rounded half away from 0
    (CoerceToTs in src/trace_processor/importers/json/json_trace_tokenizer.cc)."""
    number = text.decode()
    if not re.fullmatch(r"-?\d+(\.\d+)?", number):
        raise AssertionError(f"{number}: not a plain decimal")
    sign = -1 if number.startswith("-") else 1
    whole, _, fraction = number.lstrip("-").partition(".")
    if not fraction:
        return int(number) * 1000
    value = float(int(whole)) + float(int(fraction)) / float(10 ** len(fraction))
    if value == math.trunc(value):
        return sign * int(value) * 1000
    return sign * math.floor(value * 1000.0 + 0.5)


_TIMES = re.compile(rb'\{"ph":"X",[^\n]*?"ts":([^,]+),"dur":([^,}]+)|\{"ph":"C",[^\n]*?"ts":([^,]+),')
_EPOCH = st.integers(10**18, 2 * 10**18)  # ns since 1970: 2001 to 2033
# spans JSON holds to the ns from an origin an hour before them, and wider ones (to the µs past 10**15)
_WINDOW = st.sampled_from([10**6, 10**12, 10**15 - 2 * ORIGIN_MARGIN_NS, 10**17])


@st.composite
def epoch_events(draw) -> tuple[int, list[Begin | Value]]:
    """Slices and counter values at epoch times within a window: slices anywhere, touching the
    one before, or nested in it."""
    first, window = draw(_EPOCH), draw(_WINDOW)
    last = first + window
    track, counter = Track(0, "Ascend Hardware", 2, "Stream 2", 5), Track(0, "Counters", 9, "HBM", 0, "bytes")
    events: list[Begin | Value] = []
    slices: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(1, 25))):
        how = draw(st.sampled_from(["anywhere", "touching", "nested", "value"]))
        if how == "value":
            events.append(Value(counter, draw(st.integers(first, last)), 1.0))
            continue
        limit = last
        if how == "touching" and slices:
            start = slices[-1][0] + slices[-1][1]
        elif how == "nested" and slices:
            start = draw(st.integers(slices[-1][0], slices[-1][0] + slices[-1][1]))
            limit = slices[-1][0] + slices[-1][1]
        else:
            start = draw(st.integers(first, last))
        dur = draw(st.one_of(st.integers(0, limit - start), st.integers(0, min(limit - start, 10**4))))
        slices.append((start, dur))
        events.append(Begin(track, Slice(0, Layer.STREAM, "Stream 2", "k", start, dur)))
    return first, events


@settings(max_examples=400, deadline=None)
@given(epoch_events(), st.data())
def test_every_time_reads_back_from_the_json_text_to_the_ns_from_any_given_origin(case, data):
    first, events = case
    given_origin = data.draw(st.one_of(st.none(), st.integers(first - 10**17, first + 10**15)), "origin")
    rank = RankInfo(0, "test", Path("."), start_ns=given_origin)
    encoder = ChromeJsonEncoder(given_origin)
    text = encoder.chunk(0, events)
    origins, again = Origins(given_origin).settle([rank], {0: [(encoder.origin_ns, encoder.span)]})
    if again:  # an event before the origin given: encoded once more, as the pipeline does
        encoder = ChromeJsonEncoder(origins.origin)
        text = encoder.chunk(0, events)
        assert origins.settle([rank], {0: [(encoder.origin_ns, encoder.span)]}) == (origins, False)
    read = [tuple(perfetto_ns(number) for number in found.groups() if number is not None)
            for found in _TIMES.finditer(text)]
    # the slices as they came, then the counter values (one lane: each its own event) by time
    events = [e for e in events if type(e) is Begin] + sorted((e for e in events if type(e) is Value),
                                                              key=lambda v: v.ts_ns)
    assert len(read) == len(events)
    for times, event in zip(read, events, strict=True):
        assert times[0] >= 0  # Perfetto drops what lies before 0
        if type(event) is Begin:
            start, end = event.slice.start_ns - encoder.origin_ns, event.slice.end_ns - encoder.origin_ns
            assert times == (held(start), held(held(end) - held(start)))
        else:
            assert times == (held(event.ts_ns - encoder.origin_ns),)
    begins = [(event.slice, times) for event, times in zip(events, read, strict=True) if type(event) is Begin]
    for (a, (a_start, a_dur)), (b, (b_start, b_dur)) in pairwise(begins):  # touching or nested: still so
        assert (b.start_ns >= a.start_ns) <= (b_start >= a_start)
        assert (b.start_ns >= a.end_ns) <= (b_start >= a_start + a_dur)
        assert (b.end_ns <= a.end_ns) <= (b_start + b_dur <= a_start + a_dur)
