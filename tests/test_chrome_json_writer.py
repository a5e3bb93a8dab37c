"""The Chrome JSON writer's C loop writes the bytes orjson writes for the same records: the
reference below is the writer as it was in Python, one dict and one ``orjson.dumps`` per record."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.layout import Begin, End, Track, Value
from converters.model import Layer, Slice
from converters.writers.chrome_json import _SEPARATOR, ChromeJsonEncoder, own_origin


def reference_chunk(encoder: ChromeJsonEncoder, sequence: int, events: list) -> bytes:
    out = bytearray()
    origin = encoder.origin_ns
    named = encoder._named.setdefault(sequence, set())
    for event in events:
        if type(event) is Value:
            out += _SEPARATOR
            out += orjson.dumps({"ph": "C", "pid": event.track.rank + 1, "name": event.track.lane,
                                 "ts": (event.ts_ns - origin) / 1000, "args": {"value": event.value}})
            continue
        if type(event) is not Begin:
            continue
        s, track = event.slice, event.track
        tid, naming = encoder._tid(track, named)
        out += naming
        record = {"ph": "X", "pid": track.rank + 1, "tid": tid, "name": s.name,
                  "ts": (s.start_ns - origin) / 1000, "dur": s.dur_ns / 1000}
        if s.args:
            record["args"] = s.args if type(s.args) is dict else orjson.Fragment(bytes(s.args))
        out += _SEPARATOR
        out += orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)
        base = {"pid": record["pid"], "tid": record["tid"], "ts": record["ts"], "cat": "flow", "name": "flow"}
        for phase, flows in (("s", s.flows_out), ("f", s.flows_in)):
            for flow in flows:
                out += _SEPARATOR
                out += orjson.dumps({"ph": phase, "id": f"{flow:x}", "bp": "e", **base})
    return bytes(out)


tracks = st.sampled_from([Track(0, "Ascend Hardware", 2, "Stream 2", 5), Track(0, "CANN", 4, "Thread 7", 1),
                          Track(3, "HCCL", 3, "Group 0 Communication", 0),
                          Track(1, "Counters", 9, "HBM", 0, "bytes")])
times = st.one_of(st.integers(-10**6, 10**16), st.integers(-(2**62), 2**62),
                  st.sampled_from([0, 999, 10**15 - 1, 10**15, -(10**15)]))
raw_args = st.sampled_from([b'{"Task Type":"AI_CORE"}', b'{ "a" : [1, 2.50] }', b"", b"[]", b'"x"'])
int64 = st.integers(-(2**63), 2**63 - 1)  # orjson's ints
dict_args = st.dictionaries(st.one_of(st.text(max_size=5), int64), st.one_of(int64, st.text()), max_size=3)
flows = st.lists(st.integers(0, 2**64 - 1), max_size=2).map(tuple)
slices = st.builds(
    lambda name, start, dur, args, flows_out, flows_in: Slice(0, Layer.STREAM, "Stream 2", name, start, dur,
                                                              args, "", flows_out, flows_in),
    st.text(), times, st.integers(0, 10**16), st.one_of(st.none(), raw_args, dict_args), flows, flows)
events = st.lists(st.one_of(st.builds(Begin, tracks, slices), st.builds(End, tracks, times),
                            st.builds(Value, tracks, times, st.floats(allow_nan=False))), max_size=20)


@settings(max_examples=500, deadline=None)
@given(st.lists(events, min_size=1, max_size=3), st.one_of(st.none(), st.integers(0, 2**40)))
def test_chunks_are_the_bytes_orjson_writes_for_each_record(chunks, origin):
    ours, reference = ChromeJsonEncoder(origin, first_tid=3), ChromeJsonEncoder(origin, first_tid=3)
    for sequence, chunk in enumerate(chunks):
        written = ours.chunk(sequence % 2, chunk)
        if reference.origin_ns is None:  # a rank on its own clock: its first chunk sets the origin
            reference.origin_ns = own_origin(chunk)
        assert written == reference_chunk(reference, sequence % 2, chunk)
        orjson.loads(b"[0" + written + b"]")  # and it is JSON
