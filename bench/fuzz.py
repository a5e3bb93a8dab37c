"""A mutation corpus: every command run on thousands of hostile inputs, each one mutation of one
file (or of the folder layout) of a real sample or a generated profile.

    python -m bench.fuzz                      # the whole corpus (make fuzz), ~6,000 cases
    python -m bench.fuzz --cases 200          # the first 200 cases of the same sequence
    python -m bench.fuzz --case 1234 --keep   # one case again, its folder kept to look into

Each case copies its base profile into a temporary folder (the real samples under
``$TRACE2PERFETTO_REALDATA`` are never touched), mutates one file the readers read, or the folder
layout, as the case's seed says, hashes the input, and runs one command. It fails on:

- ``traceback``: a Python traceback on stderr, or ``internal error`` (a bug, not the input);
- ``hang``: no exit within ``--timeout`` seconds (the process group is killed);
- ``exit code``: an exit other than 0, 1 or 2, or 1/2 without a ``trace2perfetto: error:`` line;
- ``partial output``: an output file present after a failure, or a temporary one left behind;
- ``input changed``: a file of the input changed, removed or added (``-wal``/``-shm`` included);
- ``bad output``: a JSON document that does not parse, a trace that Perfetto's trace processor
  (``$TRACE2PERFETTO_TRACE_PROCESSOR``, else ``../shared/tools/trace_processor_shell``) loads
  with an ``error`` or ``data_loss`` stat, or refuses.

Cases run two at a time. Each runs the command line of ``trace2perfetto`` in a process forked
from a worker that has imported the package already (``python -m converters`` would spend a
second per case importing; the fork starts from exactly that state, and an exception escaping
``main`` is printed as the interpreter prints it). Deterministic: case ``i`` of seed ``s`` is
the same mutation of the same file on every machine with the same samples.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REAL = Path(os.environ.get("TRACE2PERFETTO_REALDATA") or ROOT.parent / "shared" / "data" / "real")
TRACE_PROCESSOR = Path(os.environ.get("TRACE2PERFETTO_TRACE_PROCESSOR")
                       or ROOT.parent / "shared" / "tools" / "trace_processor_shell")
DEFAULT_CASES = 6000
DEFAULT_SEED = 23

# -- the bases: real samples first, generated profiles for what no sample has ----------------------


@dataclass(frozen=True)
class Base:
    """A profile to mutate: a real sample (``real``: its path under the samples, ``drop``: files
    to leave out, so a fallback file is the one read) or a generated one (``make``); ``lone``: the
    file passed alone instead of the folder."""

    name: str
    real: str = ""
    make: Callable[[Path], None] | None = None
    drop: tuple[str, ...] = ()
    lone: str = ""


def _gen_msprof(layout: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        from fixtures.msprof_gen import write_msprof_profile
        write_msprof_profile(root, ranks=2, steps=2, tasks_per_step=20, seed=1, layout=layout)
    return make


def _gen_ascend_pt(root: Path) -> None:
    from fixtures.ascend_pt_gen import write_ascend_pt_profile
    write_ascend_pt_profile(root, ranks=2, steps=2, tasks_per_step=20, seed=1)


def _gen_mindspore1x(root: Path) -> None:
    from fixtures.mindspore1x_gen import write_mindspore1x_profile
    write_mindspore1x_profile(root, ranks=2, steps=2, ops_per_step=20, seed=1, aicpu="txt")


def _gen_host_info(root: Path) -> None:
    from fixtures.host_info_gen import write_host_info
    from fixtures.msprof_gen import write_msprof_profile
    write_msprof_profile(root, ranks=2, steps=2, tasks_per_step=20, seed=1)
    write_host_info(root, rank=1, steps=2, unfinished=1, seed=1)


def _gen_database(root: Path) -> None:
    from fixtures.ascend_db_gen import write_ascend_db
    for rank in (0, 1):
        folder = root / f"rank{rank}_ascend_pt"
        write_ascend_db(folder / "ASCEND_PROFILER_OUTPUT", rank=rank, steps=2, tasks_per_step=20, seed=1)
        (folder / f"profiler_info_{rank}.json").write_text(f'{{"rank_id": {rank}}}')


def _gen_nsys(root: Path) -> None:
    from fixtures.nsys_gen import write_nsys_export
    for rank in (0, 1):
        write_nsys_export(root / f"rank{rank}.sqlite", rank=rank, steps=2, kernels=10, seed=rank)


def _gen_kineto(**options) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        from fixtures.kineto_gen import write_kineto_traces
        write_kineto_traces(root, seed=1, **{"ranks": 2, "steps": 2, **options})
    return make


def _gen_paddle(form: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        from fixtures.paddle_gen import generate_profile
        generate_profile(root, form=form, steps=2, seed=1, ranks=2, hidden=64, batch=8)
    return make


def _gen_rocprof(root: Path) -> None:
    from fixtures.rocprof_gen import write_rocprof
    write_rocprof(root, ranks=2, steps=2, seed=1)


BASES = (
    Base("msprof-2rank", real="msprof-2rank"),
    Base("ascend-pt-2rank", real="ascend-pt-2rank"),
    Base("ascend-pt-2rank/kernel_details", real="ascend-pt-2rank", drop=("trace_view.json",)),
    Base("ascend-pt-2rank/trace_view.json", real="ascend-pt-2rank",
         lone="rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"),
    Base("ascend-pt-db", real="ascend-pt-db"),
    Base("msprof-db", real="msprof-db"),
    Base("msprof-db/msprof_0.db", real="msprof-db", lone="msprof_0.db"),
    Base("mindspore-1x/single-device", real="mindspore-1x/single-device"),
    Base("mindspore-1x/hccl-rank6", real="mindspore-1x/hccl-rank6"),
    Base("mindspore-cpu/pynative", real="mindspore-cpu/pynative-profile"),
    Base("mindspore-cpu/graph", real="mindspore-cpu/graph-legacy-Profiler"),
    Base("mindspore-cpu/memory", real="mindspore-cpu/pynative-profile-memory"),
    Base("mindspore-2.0-cpu", real="mindspore-2.0-cpu"),
    Base("kineto-2rank", real="kineto-2rank"),
    Base("kineto-1.8-resnet50", real="kineto-1.8-resnet50"),
    Base("kineto-gloo-2rank", real="kineto-gloo-2rank"),
    Base("paddle-cpu-chrome", real="paddle-cpu-chrome"),
    Base("paddle-cpu-protobuf", real="paddle-cpu-protobuf"),
    Base("nsys-cloverleaf", real="nsys-cloverleaf"),
    Base("gen/msprof-timeline", make=_gen_msprof("timeline")),
    Base("gen/msprof-cann8", make=_gen_msprof("cann8")),
    Base("gen/ascend-pt", make=_gen_ascend_pt),
    Base("gen/mindspore1x", make=_gen_mindspore1x),
    Base("gen/host-info", make=_gen_host_info),
    Base("gen/ascend-db", make=_gen_database),
    Base("gen/kineto-gz", make=_gen_kineto(gzip=True)),
    Base("gen/kineto-gz-3mb", make=_gen_kineto(ranks=1, gzip=True, target_mb=3)),
    Base("gen/paddle-chrome", make=_gen_paddle("chrome")),
    Base("gen/paddle-protobuf", make=_gen_paddle("protobuf")),
    Base("gen/nsys", make=_gen_nsys),
    # not the real rocprof-908 yet: its one 15 s step of 43,915 kernels and 1,310 collectives makes
    # ``critical`` (and so ``report``) exhaust memory in dependency_graph.contract, whatever the mutation
    Base("gen/rocprof", make=_gen_rocprof),
)

# The files some reader reads, by kind; the others (the profilers' own summaries) are not mutated.
FORMATS = (
    ("sqlite", re.compile(r"\.(db|sqlite)$")),
    ("gzip", re.compile(r"\.gz$")),
    ("protobuf", re.compile(r"\.pb$")),
    ("metadata", re.compile(r"^(profiler_info\w*\.json|profiler_metadata\.json|info\.json\.\d+|"
                            r"(start|end)_info\.\d+)$")),
    ("csv", re.compile(r"^(kernel_details|framework_raw_\d+|aicpu_intermediate_\d+|"
                       r"step_trace_raw_\d+_detail_time|hccl_raw_\d+|host_(info|memory)_\d+|"
                       r"cpu_op_detail_info_\d+)\.csv$|^cpu_ms_memory_record_\d+\.txt$")),
    ("text", re.compile(r"^(output_timeline_data_\d+\.txt|output_data_preprocess_aicpu_\d+\.txt|"
                        r"host_start\.log\.\d+|min_cycle_counter_\d+\.txt|"
                        r"cpu_op_execute_timestamp_\d+\.txt)$")),
    ("rocprof json", re.compile(r"_results\.json$")),
    ("chrome json", re.compile(r"(^trace_view|^msprof_.*|^task_time_.*|^hccl_.*|^step_trace_.*|"
                               r"^timeline_\d+|^cpu_timeline_display_\d+|\.pt\.trace|\.paddle_trace)\.json$|"
                               r"^iter\d+\.trace$")),
)
LAYOUT = "folder layout"

COMMANDS = {
    "convert summary pftrace": ("convert", "out.pftrace"),
    "convert detail pftrace": ("convert", "out.pftrace", "--kind", "detail"),
    "convert detail json": ("convert", "out.json", "--kind", "detail"),
    "convert summary json.gz": ("convert", "out.json.gz"),
    "convert detail pftrace.gz": ("convert", "out.pftrace.gz", "--kind", "detail", "--max-size", "1M"),
    "info": ("info",),
    "info json": ("info", "--format", "json"),
    "overlap": ("overlap",),
    "overlap csv": ("overlap", "--format", "csv"),
    "overlap json": ("overlap", "--format", "json"),
    "comm": ("comm",),
    "comm json": ("comm", "--format", "json"),
    "comm slow-ranks": ("comm", "--slow-ranks"),
    "report json": ("report", "out.report.json", "--format", "json"),
    "report html": ("report", "out.html"),
}


def file_format(name: str) -> str | None:
    return next((kind for kind, pattern in FORMATS if pattern.search(name)), None)


# -- mutations ------------------------------------------------------------------------------------

HOSTILE_VALUES = (
    b"[1,2]", b'{"a":1}', b"[]", b"{}", b"null", b"true", b'"x"', b'""', b"-1", b"0", b"1e400", b"-1e400",
    b"1.7976931348623157e308", b"18446744073709551616", b"-9223372036854775809", b"9223372036854775807",
    b"123456789012345678901234567890", b'"1e400"', b'"NaN"', b'"inf"', b'"-99999999999999999999999"',
    b'"\\ud800"', b'"\xff\xfe"', b"0.000001", b"-0.0", b"4611686018427387904", b'"12345678901234567890.123"',
)
CHROME_KEYS = ("pid", "tid", "cat", "args", "ts", "dur", "name", "ph", "id", "bp", "rank", "distributedInfo",
               "baseTimeNanoseconds", "Model Id", "Iteration ID", "FP Start", "BP End", "Task Type",
               "device id", "size", "correlation", "start_time", "traceEvents", "stream", "device")


def _value_end(data: bytes, i: int) -> int:
    """The end of the JSON value starting at ``i`` (whitespace skipped), by brackets and strings
    only: good enough to replace a value in a file that is otherwise valid."""
    n = len(data)
    while i < n and data[i] in b" \t\r\n":
        i += 1
    if i >= n:
        return n
    if data[i] == ord('"'):
        i += 1
        while i < n and data[i] != ord('"'):
            i += 2 if data[i] == ord("\\") else 1
        return min(i + 1, n)
    if data[i] in b"[{":
        depth = 0
        while i < n:
            c = data[i]
            if c == ord('"'):
                i = _value_end(data, i)
                continue
            if c in b"[{":
                depth += 1
            elif c in b"]}":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return n
    while i < n and data[i] not in b",]} \t\r\n":
        i += 1
    return i


def _key_spans(data: bytes, key: str) -> list[tuple[int, int]]:
    """(start, end) of the values of ``"key":`` in the JSON text."""
    found = []
    for match in re.finditer(rb'"' + re.escape(key.encode()) + rb'"\s*:\s*', data):
        found.append((match.end(), _value_end(data, match.end())))
        if len(found) >= 20000:
            break
    return found


def _replace_values(data: bytes, rng: random.Random, keys: tuple[str, ...],
                    values: tuple[bytes, ...]) -> bytes:
    """One key's value replaced, in one event or in every event."""
    present = [k for k in keys if f'"{k}"'.encode() in data]
    if not present:
        return _flip(data, rng)
    key = rng.choice(present)
    spans = _key_spans(data, key)
    if not spans:
        return _flip(data, rng)
    value = rng.choice(values)
    chosen = spans if rng.random() < 0.3 else [rng.choice(spans)]
    out, last = [], 0
    for start, end in chosen:
        out += [data[last:start], value]
        last = end
    return b"".join(out) + data[last:]


def _flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return b"\xff"
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 8, 64))):
        at = rng.randrange(len(out))
        out[at] ^= rng.randrange(1, 256)
    return bytes(out)


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data) + 1)] if data else data


def _garbage(data: bytes, rng: random.Random) -> bytes:
    blob = rng.choice((b'{"ph": "X", "ts": ]', b"\x00" * 7, b"\xff\xfe\xc3", b"},{", b'"', b"\\", b"]]]]",
                       bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))))
    at = rng.randrange(len(data) + 1)
    return data[:at] + blob + data[at + rng.choice((0, len(blob))):]


def _deep(data: bytes, rng: random.Random) -> bytes:
    depth = rng.choice((1000, 3000, 100_000))
    nest = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
    deep = nest[0] * depth + b"1" + nest[1] * depth
    where = rng.choice(("args", "name", "event", "top"))
    if where == "top":
        return b"[" * depth + data + b"]" * depth
    if where == "event":
        at = data.find(b"{", rng.randrange(max(len(data) // 2, 1)))
        return data[:at] + deep + b"," + data[at:] if at > 0 else deep
    return _replace_values(data, rng, (where,), (deep,))


def _escapes(data: bytes, rng: random.Random) -> bytes:
    values = (b'"\\ud800x\\u0000"', b'"\\udfff"', b'"a\\"b\\\\c\\n\\t"', b'"\\u00e9\\u4e2d"', b'"\\x"',
              b'"' + b"\\u0041" * 5000 + b'"', b'"\xe4\xb8\xad\xff"')
    return _replace_values(data, rng, ("name", "cat", "args", "pid", "tid", "ts", "Task Type"), values)


def _duplicate_keys(data: bytes, rng: random.Random) -> bytes:
    key = rng.choice(("ts", "dur", "pid", "tid", "name", "ph", "args"))
    spans = _key_spans(data, key)
    if not spans:
        return _flip(data, rng)
    start, _ = rng.choice(spans)
    head = data.rfind(b'"' + key.encode() + b'"', 0, start)
    return data[:head] + b'"' + key.encode() + b'":' + rng.choice(HOSTILE_VALUES) + b"," + data[head:]


def _wrong_types(data: bytes, rng: random.Random) -> bytes:
    return _replace_values(data, rng, CHROME_KEYS, HOSTILE_VALUES)


def _huge_numbers(data: bytes, rng: random.Random) -> bytes:
    numbers = [m.span() for m in re.finditer(rb"(?<=[:\[,])\s*-?\d+(\.\d+)?([eE][-+]?\d+)?(?=[,\]}])", data)]
    if not numbers:
        return _flip(data, rng)
    values = (b"1e400", b"-1e400", b"18446744073709551616", b"1" + b"0" * 400, b"1e308", b"-9.9e307",
              b"9223372036854775807", b"-9223372036854775808", b"4.6116860184273879e18")
    chosen = numbers if rng.random() < 0.2 else rng.sample(numbers, min(len(numbers), rng.choice((1, 3))))
    out, last = [], 0
    for start, end in sorted(chosen):
        out += [data[last:start], rng.choice(values)]
        last = end
    return b"".join(out) + data[last:]


def _not_utf8(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe4\xb8")) + data[at:]


def _whole(data: bytes, rng: random.Random) -> bytes:
    return rng.choice((b"", b" ", b"{}", b"[]", b"null", b"[{}]", b"[1]", b'{"traceEvents": 5}', b"[" * 5,
                       b'{"traceEvents": [], "traceEvents": {}}', b"\xef\xbb\xbf" + data))


ROCPROF_KEYS = ("start_timestamp", "end_timestamp", "kernel_id", "agent_id", "queue_id", "handle",
                "internal", "correlation_id", "thread_id", "kind", "operation", "type", "gpu_index",
                "formatted_kernel_name", "kernel_symbols", "buffer_records", "dispatch_info", "operations",
                "key", "value", "agents")
CHROME = {"truncate": _truncate, "flip bytes": _flip, "garbage": _garbage, "deep nesting": _deep,
          "wrong types": _wrong_types, "huge numbers": _huge_numbers, "escapes": _escapes,
          "duplicate keys": _duplicate_keys, "not utf-8": _not_utf8, "whole file": _whole}


def _gzip_members(data: bytes, rng: random.Random) -> bytes:
    extra = rng.choice((gzip.compress(b""), gzip.compress(b""), gzip.compress(b"], 1]"), b"\x00" * 16,
                        b"\x1f\x8b", b"garbage after", gzip.compress(b"")[:10]))
    return data + extra


def _gzip_crc(data: bytes, rng: random.Random) -> bytes:
    if len(data) < 8:
        return _flip(data, rng)
    at = len(data) - rng.randrange(1, 9)  # CRC32 or ISIZE of the (last) member
    return data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:]


def _gzip_inside(data: bytes, rng: random.Random) -> bytes:
    try:
        text = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return _flip(data, rng)
    kind = rng.choice(sorted(CHROME))
    return gzip.compress(CHROME[kind](text, rng), compresslevel=1)


GZIP = {"truncate": _truncate, "flip bytes": lambda d, r: d[:10] + _flip(d[10:], r),
        "appended members": _gzip_members, "corrupt crc": _gzip_crc, "mutated inside": _gzip_inside,
        "whole file": _whole}


def _csv_rows(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _csv_huge_field(data: bytes, rng: random.Random) -> bytes:
    lines = _csv_rows(data)
    at = rng.randrange(len(lines))
    fields = lines[at].split(b",")
    column = rng.randrange(len(fields))
    huge = rng.choice((b"x" * 140_000, b'"' + b"y" * 200_000 + b'"', b'"unclosed' + b"z" * 10))
    fields[column] = huge
    lines[at] = b",".join(fields)
    return b"\n".join(lines)


def _csv_columns(data: bytes, rng: random.Random) -> bytes:
    lines = _csv_rows(data)
    at = rng.choice((0, 0, rng.randrange(len(lines))))
    fields = lines[at].split(b",")
    how = rng.choice(("drop", "drop", "add", "rename", "duplicate"))
    column = rng.randrange(len(fields))
    if how == "drop":
        del fields[column]
    elif how == "add":
        fields.insert(column, b"extra")
    elif how == "rename":
        fields[column] = b"Renamed"
    else:
        fields.insert(column, fields[column])
    lines[at] = b",".join(fields)
    return b"\n".join(lines)


def _csv_types(data: bytes, rng: random.Random) -> bytes:
    lines = _csv_rows(data)
    if len(lines) < 2:
        return _flip(data, rng)
    values = (b"abc", b"", b"-1", b"1e400", b"inf", b"nan", b"-inf", b"18446744073709551616", b"1" * 400,
              b"9" * 30 + b".5", b"N/A", b"-", b"0x1f", b"1,5", b'"{}"', b'"[1, 2]"', b'"{""a"": [1]}"',
              b"\t", b"-99999999999999999999", b"1.5e308")
    for _ in range(rng.choice((1, 1, 3, 20))):
        at = rng.randrange(1, len(lines))
        fields = lines[at].split(b",")
        fields[rng.randrange(len(fields))] = rng.choice(values)
        lines[at] = b",".join(fields)
    return b"\n".join(lines)


def _csv_tabs(data: bytes, rng: random.Random) -> bytes:
    how = rng.choice(("separators", "in fields", "crlf", "nul", "quote"))
    if how == "separators":
        return data.replace(b",", b"\t")
    if how == "crlf":
        return data.replace(b"\n", b"\r\n")
    lines = _csv_rows(data)
    at = rng.randrange(len(lines))
    insert = {"in fields": b"\t", "nul": b"\x00", "quote": b'"'}[how]
    line = lines[at]
    cut = rng.randrange(len(line) + 1)
    lines[at] = line[:cut] + insert + line[cut:]
    return b"\n".join(lines)


CSV = {"truncate": _truncate, "flip bytes": _flip, "huge field": _csv_huge_field, "columns": _csv_columns,
       "wrong types": _csv_types, "tabs and quotes": _csv_tabs, "not utf-8": _not_utf8, "whole file": _whole,
       "huge numbers": _huge_numbers}

TEXT = {"truncate": _truncate, "flip bytes": _flip, "fields": _csv_columns, "wrong types": _csv_types,
        "huge line": _csv_huge_field, "huge numbers": _huge_numbers, "not utf-8": _not_utf8,
        "whole file": _whole, "tabs and quotes": _csv_tabs}


def _metadata_types(data: bytes, rng: random.Random) -> bytes:
    try:
        value = json.loads(data)
    except ValueError:
        return _flip(data, rng)
    paths: list[list] = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append([*path, k])
                walk(v, [*path, k])
        elif isinstance(node, list):
            for i, v in enumerate(node[:5]):
                paths.append([*path, i])
                walk(v, [*path, i])

    walk(value, [])
    if not paths:
        return _whole(data, rng)
    path = rng.choice(paths)
    hostile = rng.choice(HOSTILE_VALUES + (b"[[[[[[[[[[[[]]]]]]]]]]]]", b"-5", b"3.5", b'"12abc"'))
    marker = "\u2603MARK\u2603"
    node = value
    for k in path[:-1]:
        node = node[k]
    if rng.random() < 0.2 and isinstance(node, dict):
        del node[path[-1]]
        return json.dumps(value).encode()
    node[path[-1]] = marker
    return json.dumps(value, ensure_ascii=False).encode().replace(f'"{marker}"'.encode(), hostile)


METADATA = {"wrong types": _metadata_types, "truncate": _truncate, "flip bytes": _flip, "whole file": _whole,
            "not utf-8": _not_utf8, "huge numbers": _huge_numbers}


def _sqlite_flip(data: bytes, rng: random.Random) -> bytes:
    if len(data) < 100:
        return _flip(data, rng)
    out = bytearray(data)
    where = rng.choice(("header", "schema", "table name", "anywhere", "anywhere"))
    if where == "table name":  # a byte of a name in sqlite_master: a name that is not UTF-8
        names = [m.start() + 13 for m in re.finditer(rb"CREATE TABLE ", data[:65536])]
        if names:
            at = rng.choice(names) + rng.randrange(1, 4)
            out[at] = rng.choice((0xFF, 0xC3, 0x80, out[at] ^ 0x20))
            return bytes(out)
    span = {"header": (0, 100), "schema": (100, min(len(data), 4096))}.get(where, (0, len(data)))
    for _ in range(rng.choice((1, 4, 32))):
        at = rng.randrange(*span)
        out[at] ^= rng.randrange(1, 256)
    return bytes(out)


def _sqlite_truncate(data: bytes, rng: random.Random) -> bytes:
    page = 4096 if len(data) > 8192 else 1
    return data[: rng.randrange(len(data) // page + 1) * page] if rng.random() < 0.5 else _truncate(data, rng)


SQL_VALUES = ("1e300", "-1e300", "'abc'", "NULL", "9223372036854775807", "-9223372036854775808", "X'FF00'",
              "'1e400'", "'99999999999999999999999'", "0", "-1", "9e18", "'\u4e2d'", "CAST(x'ff' AS TEXT)")


def _sqlite_values(path: Path, rng: random.Random) -> None:
    """Rows changed through SQLite itself: values of wrong types, huge or infinite numbers, text
    that is not UTF-8, rows or tables gone."""
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        tables = [t for t in tables if db.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]] or tables
        if not tables:
            return
        table = rng.choice(tables)
        how = rng.choice(("value", "value", "value", "all rows", "drop table", "delete rows"))
        columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
        if how == "drop table":
            db.execute(f'DROP TABLE "{table}"')
        elif how == "delete rows":
            db.execute(f'DELETE FROM "{table}" WHERE rowid % 2 = 0')
        elif columns:
            column, value = rng.choice(columns), rng.choice(SQL_VALUES)
            where = "" if how == "all rows" else \
                f' WHERE rowid IN (SELECT rowid FROM "{table}" ORDER BY random() LIMIT {rng.choice((1, 3))})'
            db.execute(f'UPDATE "{table}" SET "{column}" = {value}{where}')
        db.commit()
    except sqlite3.DatabaseError:
        pass
    finally:
        db.close()


def _sqlite_wal(path: Path, rng: random.Random) -> None:
    """A write-ahead log beside the database: a real one (a writer that did not close it), an
    empty or a garbage one, or a ``-shm``."""
    how = rng.choice(("real", "real", "empty", "garbage", "shm"))
    wal, shm = path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")
    if how == "empty":
        wal.write_bytes(b"")
    elif how == "garbage":
        wal.write_bytes(bytes(rng.randrange(256) for _ in range(rng.choice((32, 4096)))))
    elif how == "shm":
        shm.write_bytes(b"\x00" * 32768)
    else:
        with tempfile.TemporaryDirectory() as side:
            copy = Path(side) / path.name
            shutil.copy(path, copy)
            db = sqlite3.connect(copy)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA wal_autocheckpoint=0")
                tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
                if tables:
                    table = rng.choice(tables)
                    db.execute(f'DELETE FROM "{table}" WHERE rowid % 3 = 0')
                db.commit()
                shutil.copy(copy, path)  # the file as the crashed writer left it, and its log
                shutil.copy(copy.with_name(copy.name + "-wal"), wal)
            except sqlite3.DatabaseError:
                pass
            finally:
                db.close()


SQLITE = {"flip bytes": _sqlite_flip, "truncate": _sqlite_truncate, "values": _sqlite_values,
          "wal beside": _sqlite_wal, "whole file": _whole}
IN_PLACE = {_sqlite_values, _sqlite_wal}  # mutations that change the file through SQLite


def _protobuf_overlong(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    overlong = (b"\xff" * 10 + b"\x01", b"\x0a\xff\xff\xff\xff\x0f", b"\x12\x80\x80\x80\x80\x10",
                b"\x08" + b"\x80" * 20)
    return data[:at] + rng.choice(overlong) + data[at:]


def _protobuf_values(data: bytes, rng: random.Random) -> bytes:
    """A field of one message set to an extreme value (end before start, 2**64 - 1, ...)."""
    from converters.readers import paddle_nodetree_pb2 as pb
    try:
        tree = pb.NodeTreesProto.FromString(data)
    except Exception:
        return _flip(data, rng)
    fields = []

    def walk(message):
        for descriptor, value in message.ListFields():
            if descriptor.type == descriptor.TYPE_MESSAGE:
                for item in (value if descriptor.is_repeated else [value])[:50]:
                    walk(item)
            elif not descriptor.is_repeated:
                fields.append((message, descriptor))

    walk(tree)
    if not fields:
        return _flip(data, rng)
    for message, descriptor in rng.sample(fields, min(len(fields), rng.choice((1, 5, 50)))):
        name = descriptor.name
        if descriptor.type == descriptor.TYPE_STRING:
            setattr(message, name, rng.choice(("", "\ud7ff" * 3, "x" * 200_000, "ProfileStep#-1", "\u4e2d",
                                               "ProfileStep#99999999999999999999")))
        elif descriptor.type in (descriptor.TYPE_FLOAT, descriptor.TYPE_DOUBLE):
            setattr(message, name, rng.choice((float("inf"), float("nan"), -1e38)))
        elif descriptor.type == descriptor.TYPE_ENUM:
            setattr(message, name, rng.choice(list(descriptor.enum_type.values_by_number)))
        else:
            bits = 32 if descriptor.type in (descriptor.TYPE_UINT32, descriptor.TYPE_INT32) else 64
            signed = descriptor.type in (descriptor.TYPE_INT32, descriptor.TYPE_INT64, descriptor.TYPE_SINT64)
            top = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
            setattr(message, name, rng.choice((top, 0, -top - 1 if signed else 1, top // 2)))
    return tree.SerializePartialToString()  # Paddle leaves required fields of value 0 out


PROTOBUF = {"truncate": _truncate, "flip bytes": _flip, "overlong fields": _protobuf_overlong,
            "wrong values": _protobuf_values, "garbage": _garbage, "whole file": _whole}

ROCPROF = {**CHROME, "wrong types": lambda data, rng: _replace_values(data, rng, ROCPROF_KEYS,
                                                                        HOSTILE_VALUES)}
MUTATIONS = {"rocprof json": ROCPROF,
             "chrome json": CHROME, "gzip": GZIP, "csv": CSV, "text": TEXT, "metadata": METADATA,
             "sqlite": SQLITE, "protobuf": PROTOBUF}

NOT_UTF8 = b"\xff\xfe-\xe9"  # bytes no UTF-8 decoder accepts, as a name from a Latin-1 system has


def _layout(root: Path, rng: random.Random, how: str) -> str:
    """A change to the folder layout; returns what was done."""
    entries = sorted(p for p in root.rglob("*"))
    dirs = [p for p in entries if p.is_dir() and not p.is_symlink()]
    files = [p for p in entries if p.is_file() and file_format(p.name)]
    if how == "non-utf-8 folder":
        victim = rng.choice(dirs) if dirs and rng.random() < 0.7 else root
        name = os.fsencode(victim.name)
        _rename_bytes(victim, name + NOT_UTF8 if victim != root and rng.random() < 0.5 else NOT_UTF8 + name)
        return f"renamed {victim.relative_to(root.parent)} with bytes not UTF-8"
    if how == "non-utf-8 file" and files:
        victim = rng.choice(files)
        stem, dot, ext = victim.name.partition(".")
        match = re.search(r"_\d+", stem)  # keep a rank suffix and the extension: still recognised
        at = match.start() if match and rng.random() < 0.5 else len(stem)
        _rename_bytes(victim, os.fsencode(stem[:at]) + NOT_UTF8 + os.fsencode(stem[at:] + dot + ext))
        return f"renamed {victim.relative_to(root)} with bytes not UTF-8"
    if how == "file removed" and files:
        victim = rng.choice(files)
        victim.unlink()
        return f"removed {victim.relative_to(root)}"
    if how == "folder in place of a file" and files:
        victim = rng.choice(files)
        victim.unlink()
        victim.mkdir()
        return f"a folder in place of {victim.relative_to(root)}"
    if how == "rank folder twice" and dirs:
        victim = rng.choice(dirs)
        shutil.copytree(victim, victim.with_name(victim.name + "_again"), symlinks=True)
        return f"copied {victim.relative_to(root)}"
    if how == "symlinks":
        target = rng.choice(dirs) if dirs else root
        os.symlink(root, target / "loop")
        if files:
            os.symlink("/nonexistent/file", rng.choice(files).with_name("dangling.json"))
        return f"a symlink loop in {target.relative_to(root.parent)}"
    if how == "unreadable file" and files:
        victim = rng.choice(files)
        victim.chmod(0)  # root reads it anyway; then it is at least an empty-permission file
        return f"chmod 0 {victim.relative_to(root)}"
    if how == "odd names":
        victim = rng.choice(dirs) if dirs else root
        (victim / rng.choice(("x.pt.trace.json", "msprof_1.json", "trace_view.json", "info.json.9",
                              "kernel_details.csv", "a b\nc.paddle_trace.json", "host_start.log.3",
                              "output_timeline_data_7.txt", "ascend_pytorch_profiler_5.db"))).write_bytes(
            rng.choice((b"", b"[", b"{}", b"\xff\xfe", b"op_name,stream_id\n")))
        return f"an odd file in {victim.relative_to(root.parent)}"
    victim = rng.choice(files) if files else None
    if victim is not None:
        victim.write_bytes(b"")
        return f"emptied {victim.relative_to(root)}"
    return "nothing"


LAYOUTS = {  # a mutation of the layout: one of its ways, as the case's seed says
    "names not utf-8": ("non-utf-8 folder", "non-utf-8 file"),
    "files": ("file removed", "folder in place of a file", "emptied file", "unreadable file"),
    "folders": ("rank folder twice", "symlinks", "odd names"),
}


def _rename_bytes(path: Path, name: bytes) -> None:
    os.rename(os.fsencode(path), os.path.join(os.fsencode(path.parent), name))


# -- cases ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    index: int
    base: str
    fmt: str
    mutation: str
    command: str
    file: str = ""  # the file mutated, relative to the base, or "" for a layout change


def plan(bases: dict[str, Path], count: int, seed: int) -> list[Case]:
    """``count`` cases: every (base, format, mutation) in turn, each time with the next command
    and a file of the base chosen by the case's seed."""
    pairs = []
    files_of: dict[tuple[str, str], list[str]] = {}
    for base in BASES:
        root = bases.get(base.name)
        if root is None:
            continue
        by_format: dict[str, list[str]] = defaultdict(list)
        for path in sorted(root.rglob("*")):
            kind = file_format(path.name)
            if kind and path.is_file() and (not base.lone or str(path.relative_to(root)) == base.lone):
                by_format[kind].append(str(path.relative_to(root)))
        for kind in sorted(by_format):
            files_of[base.name, kind] = by_format[kind]
            pairs += [(base.name, kind, mutation) for mutation in MUTATIONS[kind]]
        if not base.lone:
            pairs += [(base.name, LAYOUT, how) for how in LAYOUTS]
    commands = list(COMMANDS)
    cases = []
    for index in range(count):
        name, kind, mutation = pairs[index % len(pairs)]
        rng = random.Random(f"{seed}/{index}/plan")
        turn = index // len(pairs)
        command = commands[(turn + index) % len(commands)]
        file = rng.choice(files_of[name, kind]) if kind != LAYOUT else ""
        cases.append(Case(index, name, kind, mutation, command, file))
    return cases


def make_bases(where: Path, names: set[str] | None = None) -> dict[str, Path]:
    """Each base in ``where``: a real sample copied (and made writable), or a generated profile."""
    made = {}
    for base in BASES:
        if names is not None and base.name not in names:
            continue
        root = where / base.name.replace("/", "+")
        if base.real:
            source = REAL / base.real
            if not source.is_dir():
                continue
            if not root.exists():
                shutil.copytree(source, root, ignore=shutil.ignore_patterns("*.md", "*.py", *base.drop))
                for path in root.rglob("*"):
                    path.chmod(0o755 if path.is_dir() else 0o644)
        elif not root.exists():
            base.make(root)
        made[base.name] = root
    return made


@dataclass
class Outcome:
    case: Case
    code: int | None = None
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (kind, signature)
    what: str = ""  # the mutation as done
    stderr: str = ""


def run_case(case: Case, bases: dict[str, Path], work: Path, seed: int, timeout: float,
             keep: bool = False) -> Outcome:
    """Copy the base, mutate, hash, run the command, check."""
    outcome = Outcome(case)
    base = next(b for b in BASES if b.name == case.base)
    folder = Path(tempfile.mkdtemp(prefix=f"case{case.index}-", dir=work))
    try:
        root = folder / "in" / Path(case.base).name
        shutil.copytree(bases[case.base], root, symlinks=True)
        out_dir = folder / "out"
        out_dir.mkdir()
        rng = random.Random(f"{seed}/{case.index}/mutate")
        outcome.what = _mutate(case, root, rng)
        profile = _profile(root, base)
        before = _digest(folder / "in")
        argv, output = _argv(case.command, profile, out_dir)
        started = time.monotonic()
        code, stdout, stderr = _run_forked(argv, folder, timeout)
        outcome.seconds = time.monotonic() - started
        outcome.code, outcome.stderr = code, stderr.decode("utf-8", "replace")[-4000:]
        outcome.failures = _check(case, code, stdout, outcome.stderr, output, out_dir, before,
                                  _digest(folder / "in"), folder)
    except Exception as e:  # the harness itself: said as such, never mistaken for a pass
        outcome.failures = [("harness", f"{type(e).__name__}: {e}")]
    finally:
        if not keep:
            _remove(folder)
    if keep:
        print(f"case {case.index} kept in {folder}")
    return outcome


def _remove(folder: Path) -> None:
    for path in folder.rglob("*"):  # "unreadable file" cases made a file mode 0
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(os.fsencode(folder), ignore_errors=True)


def _mutate(case: Case, root: Path, rng: random.Random) -> str:
    if case.fmt == LAYOUT:
        return _layout(root, rng, rng.choice(LAYOUTS[case.mutation]))
    path = root / case.file
    mutate = MUTATIONS[case.fmt][case.mutation]
    if mutate in IN_PLACE:
        mutate(path, rng)
    else:
        path.write_bytes(mutate(path.read_bytes(), rng))
    return f"{case.mutation} of {case.file}"


def _profile(root: Path, base: Base) -> bytes:
    """The path passed on the command line: the base's folder or its lone file, wherever the
    layout mutation moved it (folder names may now be bytes that are not UTF-8)."""
    top = os.fsencode(root.parent)
    names = os.listdir(top)
    here = os.path.join(top, names[0]) if len(names) == 1 else os.fsencode(root)
    if not base.lone:
        return here
    return os.path.join(here, os.fsencode(base.lone))


def _argv(command: str, profile: bytes, out_dir: Path) -> tuple[list[bytes], Path | None]:
    words = COMMANDS[command]
    if words[0] == "convert":
        output = out_dir / words[1]
        return [profile, b"-o", os.fsencode(output), *map(os.fsencode, words[2:])], output
    if words[0] == "report":
        output = out_dir / words[1]
        return [b"report", profile, b"-o", os.fsencode(output), *map(os.fsencode, words[2:])], output
    return [os.fsencode(words[0]), profile, *map(os.fsencode, words[1:])], None


def _digest(root: Path) -> dict[bytes, str]:
    found = {}
    for folder, dirs, files in os.walk(os.fsencode(root)):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                found[path] = "link " + os.fsdecode(os.readlink(path))
            elif os.path.isfile(path):
                try:
                    with open(path, "rb") as f:
                        found[path] = hashlib.sha1(f.read()).hexdigest()
                except OSError:
                    found[path] = "unreadable"
            else:
                found[path] = "dir"
    return found


def _run_forked(argv: list[bytes], folder: Path, timeout: float) -> tuple[int | None, bytes, bytes]:
    """``trace2perfetto ARGV`` in a child forked from this (warm) process, in a session of its
    own so that a hang is killed with every worker it started; (exit code or None, out, err)."""
    out_path, err_path = folder / "stdout", folder / "stderr"
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.setsid()
            resource.setrlimit(resource.RLIMIT_CPU, (int(timeout) * 4, int(timeout) * 4 + 5))  # if we die
            signal.alarm(int(timeout) * 4)
            os.chdir(folder)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            for fd, path in ((1, out_path), (2, err_path)):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.stdin = open(0, closefd=False)
            sys.stdout = open(1, "w", closefd=False, encoding="utf-8")  # strict, as in a UTF-8 locale
            sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
            sys.argv = ["trace2perfetto", *map(os.fsdecode, argv)]
            from converters.cli import main
            code = main(sys.argv[1:])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            import traceback
            traceback.print_exc()  # what the interpreter prints for an exception escaping main
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code if isinstance(code, int) else 1)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            _kill_session(pid)
            os.waitpid(pid, 0)
            code = None
            break
        time.sleep(0.02)
    _kill_session(pid)  # workers the command left behind
    return code, _read(out_path), _read(err_path)


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


_TRACE_QUERY = ("select name || ' [' || severity || ']' as problem from stats "
                "where severity in ('error', 'data_loss') and value > 0;\n")


def _check(case: Case, code: int | None, stdout: bytes, stderr: str, output: Path | None, out_dir: Path,
           before: dict, after: dict, folder: Path) -> list[tuple[str, str]]:
    failures = []
    if code is None:
        return [("hang", f"no exit in time: {case.command} on {case.fmt}")]
    if "Traceback" in stderr or "internal error" in stderr:
        failures.append(("traceback", _signature(stderr)))
    elif code not in (0, 1, 2):
        failures.append(("exit code", f"exit {code}"))
    elif code != 0 and "trace2perfetto: error:" not in stderr:
        failures.append(("exit code", f"exit {code} without an error line"))
    leftovers = [p.name for p in out_dir.iterdir() if output is None or p.name != output.name]
    if code != 0 and output is not None and output.exists():
        failures.append(("partial output", f"{output.name} written by a failing command"))
    if leftovers:
        failures.append(("partial output", f"left behind: {sorted(leftovers)[:3]}"))
    if before != after:
        changed = sorted(os.fsdecode(p) for p in before.keys() ^ after.keys())
        changed += sorted(os.fsdecode(p) for p in before.keys() & after.keys() if before[p] != after[p])
        failures.append(("input changed", ", ".join(Path(c).name for c in changed[:3])))
    if code == 0 and not failures:
        failures += _check_output(case, stdout, output, folder)
    return failures


def _check_output(case: Case, stdout: bytes, output: Path | None, folder: Path) -> list[tuple[str, str]]:
    if case.command.endswith("json") and output is None:
        try:
            json.loads(stdout)
        except ValueError as e:
            return [("bad output", f"stdout of {case.command} is not JSON: {e}")]
    if output is None:
        return []
    if not output.exists():
        return [("bad output", f"exit 0 but no {output.name}")]
    if case.command == "report json":
        try:
            json.loads(output.read_bytes())
        except ValueError as e:
            return [("bad output", f"the JSON report does not parse: {e}")]
    if not case.command.startswith("convert") or not TRACE_PROCESSOR.is_file():
        return []
    query = folder / "query.sql"
    query.write_text(_TRACE_QUERY)
    try:
        done = subprocess.run([str(TRACE_PROCESSOR), "-q", str(query), str(output)], capture_output=True,
                              text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return [("bad output", "the trace processor did not finish")]
    if done.returncode != 0:
        return [("bad output", "the trace processor refused it: " + done.stderr.strip()[-200:])]
    problems = [line.strip('"') for line in done.stdout.strip().splitlines()[1:]]
    return [("bad output", f"trace processor: {p}") for p in problems]


def _signature(stderr: str) -> str:
    """Where a traceback ends: the exception and the last frame of the project's code."""
    first = re.split(r"\n(?:The above exception|During handling of the above exception)", stderr)[0]
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', first)  # the innermost, also from a worker
    ours = [f for f in frames if "/converters/" in f[0]] or frames
    lines = [line for line in stderr.strip().splitlines() if line and not line.startswith(" ")]
    last = lines[-1] if lines else stderr.strip()[-200:]
    if "internal error" in stderr:  # one line, no frames: the exception and its message say where
        found = re.search(r"internal error (\w+: .{0,60})", stderr)
        return f"internal error {found[1] if found else ''}"
    where = f"{Path(ours[-1][0]).name}:{ours[-1][1]} {ours[-1][2]}" if ours else "?"
    return f"{re.sub(r'(: ).*', '', last)[:80]} at {where}"


# -- running it -----------------------------------------------------------------------------------

_BASES: dict[str, Path] = {}


def _warm(bases: dict[str, Path]) -> None:
    """A pool worker: import what the commands import, once (each case forks from here)."""
    global _BASES
    _BASES = bases
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import converters.analyses.report  # noqa: F401
    import converters.cli  # noqa: F401


def _in_worker(job: tuple[Case, Path, int, float, bool]) -> Outcome:
    case, work, seed, timeout, keep = job
    return run_case(case, _BASES, work, seed, timeout, keep)


def run(cases: list[Case], bases: dict[str, Path], work: Path, seed: int, timeout: float, workers: int = 2,
        keep: bool = False, progress: Callable[[Outcome, int], None] | None = None) -> list[Outcome]:
    outcomes = []
    jobs = [(case, work, seed, timeout, keep) for case in cases]
    with ProcessPoolExecutor(workers, initializer=_warm, initargs=(bases,)) as pool:
        for outcome in pool.map(_in_worker, jobs, chunksize=1):
            outcomes.append(outcome)
            if progress:
                progress(outcome, len(cases))
    return outcomes


def sample(cases: list[Case], count: int) -> list[Case]:
    """``count`` cases spread over the whole plan (every format, mutation and command turns up)."""
    step = max(len(cases) / count, 1)
    return [cases[int(i * step)] for i in range(min(count, len(cases)))]


def summary(outcomes: list[Outcome], seconds: float) -> str:
    """The table: cases per format and per command, exit codes and failures, then each root
    cause (failure kind and where) with its count and an example case."""
    lines = []
    kinds = ("traceback", "hang", "exit code", "partial output", "input changed", "bad output", "harness")
    for title, key in (("format", lambda o: o.case.fmt), ("command", lambda o: o.case.command)):
        groups: dict[str, list[Outcome]] = defaultdict(list)
        for o in outcomes:
            groups[key(o)].append(o)
        header = [title, "cases", "exit 0", "exit 1", "exit 2", *kinds]
        rows = [header]
        for name in sorted(groups):
            group = groups[name]
            codes = Counter(o.code for o in group)
            failed = Counter(kind for o in group for kind in {k for k, _ in o.failures})
            rows.append([name, str(len(group)), str(codes[0]), str(codes[1]), str(codes[2]),
                         *(str(failed[k]) for k in kinds)])
        total_failed = Counter(kind for o in outcomes for kind in {k for k, _ in o.failures})
        codes = Counter(o.code for o in outcomes)
        rows.append(["all", str(len(outcomes)), str(codes[0]), str(codes[1]), str(codes[2]),
                     *(str(total_failed[k]) for k in kinds)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for row in rows:
            cells = zip(row, widths, strict=True)
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells)))
        lines.append("")
    causes: dict[tuple[str, str], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        for kind, signature in dict.fromkeys(o.failures):
            causes[kind, signature].append(o)
    failed = sum(1 for o in outcomes if o.failures)
    lines.append(f"{len(outcomes)} cases in {seconds:.0f} s: {failed} failed, {len(causes)} distinct causes")
    for (kind, signature), group in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        example = group[0]
        lines.append(f"  {len(group):5d}  {kind}: {signature}  (e.g. case {example.case.index}: "
                     f"{example.case.command} on {example.case.base}, {example.what})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES, help="how many (default: %(default)s)")
    parser.add_argument("--sample", type=int, help="run this many cases spread over --cases")
    parser.add_argument("--case", type=int, action="append", help="run only this case (repeatable)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds a case may run (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "fuzz", help="bases, cases and results")
    parser.add_argument("--keep", action="store_true", help="keep each case's folder")
    parser.add_argument("--only", help="only cases whose base, format, mutation or command contains this")
    args = parser.parse_args(argv)
    started = time.monotonic()
    for what, path in (("real samples", REAL), ("trace processor", TRACE_PROCESSOR)):
        if not path.exists():
            print(f"warning: no {what} at {path}: cases without them (set TRACE2PERFETTO_REALDATA, "
                  "TRACE2PERFETTO_TRACE_PROCESSOR)", file=sys.stderr)
    args.work.mkdir(parents=True, exist_ok=True)
    bases = make_bases(args.work / "bases")
    cases = plan(bases, args.cases, args.seed)
    if args.case:
        cases = [c for c in cases if c.index in args.case]
    if args.sample:
        cases = sample(cases, args.sample)
    if args.only:
        cases = [c for c in cases if args.only in " ".join((c.base, c.fmt, c.mutation, c.command))]
    print(f"{len(cases)} cases over {len(bases)} bases; {args.workers} at a time, {args.timeout:.0f} s each "
          "at most", file=sys.stderr)
    cases_dir = args.work / "cases"
    cases_dir.mkdir(exist_ok=True)

    def progress(outcome: Outcome, total: int, done: list = [0]) -> None:  # noqa: B006
        done[0] += 1
        if outcome.failures:
            case, (kind, signature) = outcome.case, outcome.failures[0]
            print(f"case {case.index} ({case.command} on {case.base}, {outcome.what}): {kind}: {signature}",
                  file=sys.stderr)
        if done[0] % 100 == 0:
            print(f"... {done[0]} of {total} in {time.monotonic() - started:.0f} s", file=sys.stderr)

    outcomes = run(cases, bases, cases_dir, args.seed, args.timeout, args.workers, args.keep, progress)
    seconds = time.monotonic() - started
    (args.work / "results.json").write_text(json.dumps(
        [{**asdict(o.case), "code": o.code, "seconds": round(o.seconds, 2), "failures": o.failures,
          "what": o.what, "stderr": o.stderr if o.failures else ""} for o in outcomes], indent=1))
    print(summary(outcomes, seconds))
    print(f"(results: {args.work / 'results.json'}; one case again: python -m bench.fuzz --case N --keep)")
    return 1 if any(o.failures for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
