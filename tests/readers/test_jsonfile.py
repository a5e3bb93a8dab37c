"""Reading event arrays in batches: same events as one decode, whatever the chunking or layout."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from converters.errors import Diagnostics, InputError
from converters.readers.common import jsonfile
from converters.readers.common.jsonfile import header, iter_batches, load_events

text = st.text(alphabet=st.sampled_from(list('ab}{][,": \\\n\té中')), max_size=12)
scalar = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False), text,
                   st.booleans(), st.none())
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(text, inner, max_size=3)), max_leaves=8)
event = st.fixed_dictionaries({"ph": st.sampled_from(["X", "M"]), "name": text}, optional={"args": value})
spacing = st.sampled_from([b",", b", ", b",\n", b"\n,\n  "])


def _write(tmp: Path, events: list, sep: bytes, trailer: dict | None = None) -> Path:
    """The events as an array, or (``trailer``) as Kineto's object with keys after the array."""
    path = tmp / "trace.json"
    array = b"[" + sep.join(orjson.dumps(e) for e in events) + b"]"
    if trailer is None:
        path.write_bytes(array + b"\n")
    else:
        path.write_bytes(b'{"schemaVersion": 1, "traceEvents": ' + array + b", " + orjson.dumps(trailer)[1:])
    return path


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, max_size=30), sep=spacing, chunk=st.integers(1, 300),
       trailer=st.none() | st.dictionaries(text, value, min_size=1, max_size=3))
def test_batches_hold_the_same_events_as_one_decode(tmp_path, events, sep, chunk, trailer):
    path = _write(tmp_path, events, sep, trailer)
    diag = Diagnostics()
    batches = list(iter_batches(path, diag, orjson.loads, chunk_bytes=chunk))
    assert [e for b in batches for e in b] == events
    assert not diag


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, max_size=30), sep=spacing, chunk=st.integers(1, 300), tail=st.integers(1, 64))
def test_batches_hold_the_same_events_whatever_the_stretch_a_boundary_is_looked_for_in(
        tmp_path, monkeypatch, events, sep, chunk, tail):
    # a chunk of _TAIL bytes or more is joined to the bytes before it only in the batch (not
    # first into one buffer): at 64 KiB, taken only by files past the chunks above
    monkeypatch.setattr(jsonfile, "_TAIL", tail)
    path = _write(tmp_path, events, sep)
    diag = Diagnostics()
    assert [e for b in iter_batches(path, diag, orjson.loads, chunk_bytes=chunk) for e in b] == events
    assert not diag


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event, min_size=2, max_size=20), cut=st.floats(0.05, 0.95), chunk=st.integers(8, 200))
def test_a_cut_off_file_yields_a_prefix_of_its_events_and_one_warning(tmp_path, events, cut, chunk):
    path = _write(tmp_path, events, b", ")
    data = path.read_bytes()
    path.write_bytes(data[: max(2, int(len(data) * cut))])
    diag = Diagnostics()
    got = [e for b in iter_batches(path, diag, orjson.loads, chunk_bytes=chunk) for e in b]
    assert got == events[: len(got)]
    assert list(diag.counts) == ["truncated_file"] and "cut off at byte" in diag.messages()[0]


def test_object_form_and_garbage(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X"}], "displayTimeUnit": "ms"}')
    assert [e for b in iter_batches(path, Diagnostics(), orjson.loads, 4) for e in b] == [{"ph": "X"}]
    path.write_bytes(b'[{"ph": "X"}, {"ph": "X"} garbage, {"ph": "M"}]')
    with pytest.raises(InputError, match=r"t.json: byte \d+: not valid JSON"):
        list(iter_batches(path, Diagnostics(), orjson.loads, 8))
    path.write_bytes(b"")
    with pytest.raises(InputError, match="empty file"):
        load_events(path, Diagnostics())


def test_a_cut_off_file_still_streams_in_batches(tmp_path):
    events = [{"ph": "X", "name": f"op{i}", "args": {"i": i}} for i in range(2000)]
    path = _write(tmp_path, events, b", ")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 30])
    diag = Diagnostics()
    batches = list(iter_batches(path, diag, orjson.loads, chunk_bytes=4096))
    assert len(batches) > 10  # not read whole
    got = [e for b in batches for e in b]
    assert got == events[: len(got)] and len(got) == 1999
    assert "cut off at byte" in diag.messages()[0]


def test_garbage_deep_in_a_long_file_is_an_error_at_its_byte(tmp_path):
    events = [{"ph": "X", "name": f"op{i}"} for i in range(3000)]
    path = _write(tmp_path, events, b",")
    data = path.read_bytes()
    at = data.index(b'{"ph":"X","name":"op2500"}')
    path.write_bytes(data[:at] + b"#" + data[at + 1 :])
    with pytest.raises(InputError, match=rf"byte {at}: not valid JSON"):
        list(iter_batches(path, Diagnostics(), orjson.loads, chunk_bytes=1024))


def _object_form(events: list) -> bytes:
    """An object like Kineto's: keys before traceEvents, one after it."""
    body = b",\n".join(orjson.dumps(e) for e in events)
    return (b'{"schemaVersion": 1, "distributedInfo": {"rank": 3, "pg_config": [{"ranks": [0, 1]}, {}]},\n'
            b'"traceEvents": [\n' + body + b'\n], "traceName": "x]y", "after": [1, {"a": "}, {"}]}')


def test_an_object_form_trace_streams_in_batches_and_its_header_is_read_alone(tmp_path):
    events = [{"ph": "X", "name": f"op{i}", "args": {"dims": [[i], []]}} for i in range(2000)]
    path = tmp_path / "t.pt.trace.json"
    path.write_bytes(_object_form(events))
    batches = list(iter_batches(path, Diagnostics(), orjson.loads, chunk_bytes=4096))
    assert len(batches) > 10 and [e for b in batches for e in b] == events
    distributed = {"rank": 3, "pg_config": [{"ranks": [0, 1]}, {}]}
    assert header(path, 200) == {"schemaVersion": 1, "distributedInfo": distributed}


def test_a_gzipped_trace_streams_and_one_cut_off_keeps_its_whole_events(tmp_path):
    events = [{"ph": "X", "name": f"op{i}", "ts": i} for i in range(5000)]
    packed = gzip.compress(_object_form(events))
    path = tmp_path / "t.json.gz"
    path.write_bytes(packed)
    assert [e for b in iter_batches(path, Diagnostics(), orjson.loads, 4096) for e in b] == events
    path.write_bytes(packed[: len(packed) // 2])
    diag = Diagnostics()
    got = [e for b in iter_batches(path, diag, orjson.loads, 4096) for e in b]
    assert 0 < len(got) < len(events) and got == events[: len(got)]
    assert any("gzip stream is cut off" in m for m in diag.messages())
    path.write_bytes(packed[:20] + b"\x00garbage\xff" * 8 + packed[100:])
    with pytest.raises(InputError, match="not valid gzip data"):
        list(iter_batches(path, Diagnostics(), orjson.loads, 4096))
