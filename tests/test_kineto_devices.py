"""Every device of a Kineto trace (issue 39): an MTIA's work, written as Kineto writes it (the
``mtia_ccp_events`` of processes ``MTIA N``, one thread per queue, as in HTA's
``tests/data/mtia_trace_single_rank``), on device lanes: its kernels compute, its DMA requests are
copies (as HTA counts them), launched by ``mtia_runtime`` calls of the same correlation."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from test_trace_processor import imported

from converters import convert
from converters.cli import main

_HOST, _DEVICE = 3100453, 9
# (queue's tid, name, start µs, dur µs): kernels on "Stream 1 FW", DMA requests there and on their own queue
_WORK = [(4, "fc-dtype_Float", 120.5, 300.25), (4, "dma_request", 200.0, 40.0),
         (4, "add-dtype_Float", 400.0, 50.5), (801, "dma_request", 130.0, 500.0),
         (408, "cumsum-dtype_Int", 600.125, 100.0), (4, "fc-dtype_Float", 900.0, 80.0)]
_QUEUES = {4: "Stream 1 FW", 801: "DMA_REQUEST", 408: "Stream 102 FW"}


def _mtia_trace(folder: Path) -> Path:
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": _HOST, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": _HOST, "tid": _HOST, "args": {"name": "main"}},
        {"ph": "M", "name": "process_name", "pid": _DEVICE, "tid": 0, "args": {"name": f"MTIA {_DEVICE}"}},
        {"ph": "M", "name": "process_labels", "pid": _DEVICE, "tid": 0, "args": {"labels": "MTIA"}},
        *({"ph": "M", "name": "thread_name", "pid": _DEVICE, "tid": tid, "args": {"name": name}}
          for tid, name in _QUEUES.items()),
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": _HOST, "tid": _HOST,
         "ts": 100.0, "dur": 1000.0, "args": {"External id": 1}},
    ]
    for correlation, (tid, name, ts, dur) in enumerate(_WORK, 1):
        args: dict = {"direction": "HOST_TO_DEVICE", "size": 16, "sqid": 1} if name == "dma_request" else {
            "correlation": correlation, "stream": 1, "packet_ptr": 7}
        events.append({"ph": "X", "cat": "mtia_ccp_events", "name": name, "pid": _DEVICE, "tid": tid,
                       "ts": ts, "dur": dur, "args": args})
        if "correlation" in args:
            launch = ts - 10
            events += [
                {"ph": "X", "cat": "mtia_runtime", "name": "runFunction - job_prep_and_submit_for_execution",
                 "pid": _HOST, "tid": _HOST, "ts": launch, "dur": 5.0, "args": {"correlation": correlation}},
                {"ph": "s", "id": correlation, "pid": _HOST, "tid": _HOST, "ts": launch, "cat": "ac2g",
                 "name": "ac2g"},
                {"ph": "f", "id": correlation, "pid": _DEVICE, "tid": tid, "ts": ts, "cat": "ac2g",
                 "name": "ac2g", "bp": "e"},
            ]
    document = {"schemaVersion": 1, "deviceProperties": [],
                "distributedInfo": {"backend": "mtia:hccl,cpu:gloo", "rank": 0, "world_size": 1},
                "traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000}
    path = folder / "mtia_rank_0.json"
    path.write_text(json.dumps(document))
    return path


def _union_us(intervals: list[tuple[Decimal, Decimal]]) -> Decimal:
    total, end = Decimal(0), None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total, end = total + stop - start, stop
        elif stop > end:
            total, end = total + stop - end, stop
    return total


def test_mtia_kernels_compute_and_its_dma_requests_are_copies(tmp_path, capsys):
    path = _mtia_trace(tmp_path)
    kernels = [(Decimal(str(ts)), Decimal(str(ts)) + Decimal(str(dur))) for _, name, ts, dur in _WORK
               if name != "dma_request"]
    assert main(["overlap", str(path), "--format", "json", "-q"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert Decimal(str(row["Computing"])) == _union_us(kernels)

    assert main(["info", str(path), "--format", "json"]) == 0
    lanes = json.loads(capsys.readouterr().out)["ranks"][0]["lanes"]
    assert sorted(lanes["Ascend Hardware"]) == sorted(f"MTIA {_DEVICE} {queue}" for queue in _QUEUES.values())

    out = tmp_path / "mtia.pftrace"
    convert(path, out, kind="detail")
    problems, (slices, _, flows) = imported(out, tmp_path)
    assert problems == []
    assert flows == sum(1 for _, name, _, _ in _WORK if name != "dma_request")  # each launch to its kernel
