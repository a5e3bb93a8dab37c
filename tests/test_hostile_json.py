"""Hostile JSON the mutation corpus cannot make (issue 39): valid JSON whose whitespace between
events, or one of whose strings, is gigabytes long. Memory holds a chunk, never the stretch: the
whitespace is passed over, an event past ``MAX_EVENT_BYTES`` is left out with a counted warning
naming its byte offset; a gzip that inflates to gigabytes of padding ends, in bounded memory."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import orjson
import pytest
from test_memory import peak_mib
from test_trace_processor import imported

from converters.errors import Diagnostics, InputError
from converters.readers.common import jsonfile
from converters.readers.common.jsonfile import iter_batches

_CHUNK = 1024


def _event(i: int, name: str = "") -> bytes:
    return orjson.dumps({"ph": "X", "cat": "cpu_op", "name": name or f"op{i}", "pid": 1, "tid": 1,
                         "ts": 1000.0 + i, "dur": 1.0, "args": {"i": i}})


def _events(path: Path, chunk: int = _CHUNK) -> tuple[list, Diagnostics]:
    diag = Diagnostics()
    events = [e for batch in iter_batches(path, diag, orjson.loads, chunk) for e in batch]
    return events, diag


@pytest.mark.parametrize("form", ["array", "object"])
def test_whitespace_of_any_length_between_events_is_passed_over(tmp_path, form):
    pad = b" \n\t\r" * (20 * _CHUNK)
    body = _event(0) + pad + b"," + pad + _event(1) + b",\n" + _event(2) + pad
    data = b"[" + body + b"]" if form == "array" else b'{"traceEvents": [' + body + b'], "x": 1}'
    path = tmp_path / "pad.json"
    path.write_bytes(pad + data + pad)
    events, diag = _events(path)
    assert [e["name"] for e in events] == ["op0", "op1", "op2"]
    assert not diag


def test_an_event_past_the_limit_is_left_out_counted_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonfile, "MAX_EVENT_BYTES", 8 * _CHUNK)
    first = b"[" + _event(0) + b","
    long = _event(1, "a" * (40 * _CHUNK) + '\\" still the name')
    path = tmp_path / "long.json"
    path.write_bytes(first + long + b"," + _event(2) + b"," + _event(3, "b\\\\" * (12 * _CHUNK)) + b"]")
    events, diag = _events(path)
    assert [e["i"] for e in (json.loads(e["args"]) if isinstance(e["args"], bytes) else e["args"]
                             for e in events)] == [0, 2]
    assert diag.counts == {"long_event": 2}
    assert f"byte {len(first)}: an event of more than" in diag.messages()[0]


def test_an_escape_across_a_chunk_boundary_is_read_as_one(tmp_path):
    """An escaped backslash and an escaped quote (``\\\\\\"`` in the file) at every place of a chunk
    the long stretch reads, past the chunks buffered before it."""
    for at in range(5 * _CHUNK, 6 * _CHUNK + 8):
        name = "x" * at + '\\"' + "y" * (5 * _CHUNK)
        path = tmp_path / "escape.json"
        path.write_bytes(b"[" + _event(0, name) + b"," + _event(1) + b"]")
        events, diag = _events(path)
        assert [e["name"] for e in events] == [name, "op1"] and not diag


def test_garbage_between_events_in_a_long_stretch_is_an_error_naming_its_byte(tmp_path):
    prefix = b"[" + _event(0) + b" " * (10 * _CHUNK)
    path = tmp_path / "garbage.json"
    path.write_bytes(prefix + b"x" + b" " * (10 * _CHUNK) + b"]")
    with pytest.raises(InputError) as raised:
        _events(path)
    assert raised.value.where == f"byte {len(prefix)}"


def test_a_file_cut_off_in_a_long_stretch_keeps_its_whole_events(tmp_path):
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(b"[" + _event(0) + b"," + _event(1, "z" * (30 * _CHUNK))[:-40]))
    events, diag = _events(path)
    assert [e["name"] for e in events] == ["op0"]
    assert "truncated_file" in diag.counts


# -- gigabytes -------------------------------------------------------------------------------

_PADDING = 16 << 20
_TIMES = 128  # 2 GiB inflated from a file of ~2 MB: one gzip member of 16 MiB of padding, repeated


def _hostile(path: Path, head: bytes, pad: bytes, tail: bytes) -> None:
    """A gzip file of several members (as ``cat a.gz b.gz`` makes: one stream to a reader)."""
    member = gzip.compress(pad * (_PADDING // len(pad)), 9)
    with open(path, "wb") as f:
        f.write(gzip.compress(head))
        for _ in range(_TIMES):
            f.write(member)
        f.write(gzip.compress(tail))


def _trace_head() -> bytes:
    meta = orjson.dumps({"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}})
    step = orjson.dumps({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
                         "ts": 1000.0, "dur": 500.0, "args": {}})
    return b'{"schemaVersion": 1, "traceEvents": [' + meta + b"," + step + b"," + _event(100) + b","


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hostile")
    made = {"whitespace": folder / "whitespace.pt.trace.json.gz", "name": folder / "name.pt.trace.json.gz"}
    _hostile(made["whitespace"], _trace_head(), b" \n", _event(200) + b"]}")
    _hostile(made["name"], _trace_head() + b'{"ph": "X", "cat": "cpu_op", "name": "', b"a",
             b'", "pid": 1, "tid": 1, "ts": 1100.0, "dur": 1.0},' + _event(200) + b"]}")
    return made


@pytest.mark.parametrize("what", ["whitespace", "name"])
@pytest.mark.parametrize("command", ["info", "convert"])
def test_gigabytes_of_padding_end_in_bounded_memory(hostile, tmp_path, what, command):
    """2 GiB inflated from 2 MB: ``info`` and a conversion end, each process's peak resident set
    (the kernel's high-water mark, the same under any load) far below what the file inflates to."""
    path = hostile[what]
    assert path.stat().st_size < 4 << 20
    argv = [sys.executable, "-m", "converters", *(["info", str(path)] if command == "info" else
                                                 [str(path), "-o", str(tmp_path / "out.pftrace")])]
    assert peak_mib(argv) < 400
    if command == "convert":
        assert imported(tmp_path / "out.pftrace", tmp_path)[0] == []
