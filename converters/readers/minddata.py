"""MindData, MindSpore's data pipeline, as its profiler writes it beside the 1.x intermediates
(docs/formats.md §2): the queue the training takes its batches from, per step; the pipeline's
operators with their queues and workers; the host's CPU use (machine, process, each operator).

They become counters at each step's start (the MindData group, docs/design.md §3), read by the
report's data-preparation section and its data-loading diagnosis:

* ``device_queue_profiling_{id}.txt`` (data sink mode), else ``dataset_iterator_profiling_{id}.txt``
  (the Python iterator), as MindInsight chooses: lines ``type extra step value [time_ms]``; type
  1 is the queue (``extra`` its capacity, ``value`` its size when batch ``step`` was taken); type 0
  a time (ms) that is not drawn. Batch N is step N (MindInsight's reading).
* ``pipeline_profiling_{id}.json`` (else MindInsight's ``minddata_pipeline_raw_{id}.csv`` made from
  it): per operator its id, type, workers, output queue capacity (``length``) and sizes, one per
  monitor tick.
* ``minddata_cpu_utilization_{id}.json``: per monitor tick (``time_stamp``, ms on the clock of the
  queue's times) the machine's, the process's and each operator's CPU use in percent.

A tick belongs to the step of the last queue record at or before it (the first step before any),
as MindInsight's CPU page assigns them; each step's counters are the mean of its ticks. The
operators' queue sizes are taken at the same ticks (one monitor samples both). Without times in
the queue file or without ``time_stamp`` the ticks cannot be placed: they are left out, with a note.
"""

from __future__ import annotations

import bisect
import csv
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import Diagnostics, InputError
from ..model import Sample, Step, minddata_lane
from .common import jsonfile
from .common.textfile import csv_rows, whole_lines

FILES = {  # what each file holds -> its name, with the rank (or device) id
    "device_queue": re.compile(r"^device_queue_profiling_(\d+)\.txt$"),
    "dataset_iterator": re.compile(r"^dataset_iterator_profiling_(\d+)\.txt$"),
    "pipeline": re.compile(r"^pipeline_profiling_(\d+)\.json$"),
    "pipeline_csv": re.compile(r"^minddata_pipeline_raw_(\d+)\.csv$"),
    "cpu": re.compile(r"^minddata_cpu_utilization_(\d+)\.json$"),
}
_QUEUE_TYPE = "1"  # CONNECTOR_DEPTH; 0 is TIME
_CPU = {"device_info": "Machine CPU", "process_info": "Process CPU"}
_METRICS = {"user_utilization": "user %", "sys_utilization": "sys %", "io_utilization": "io %",
            "idle_utilization": "idle %"}  # runable_processes, context_switch_count: no percent


class QueueRecord(NamedTuple):
    step: int
    size: int
    capacity: int
    time_ms: int | None


class PipelineOp(NamedTuple):
    op_id: int
    op_type: str
    workers: int | None
    capacity: int | None  # None: an operator without an output queue (inlined, the device queue op)
    sizes: list[int]  # its output queue's size at each monitor tick


def step_samples(rank: int, steps: list[Step], sources: dict[str, Path],
                 diag: Diagnostics) -> Iterator[list[Sample]]:
    """Per step (in ``steps``' order) its MindData counters at its start, each list made as it is
    asked for: what is held is the files' figures, never the samples of every step.

    A pipeline or CPU file that is not JSON is left out with a warning: the rank's other records
    stand without it.
    """
    queue_path = sources.get("device_queue") or sources.get("dataset_iterator")
    if not steps or not (queue_path or sources.keys() & {"pipeline", "pipeline_csv", "cpu"}):
        yield from ([] for _ in steps)
        return
    index = {step.step: i for i, step in enumerate(steps)}
    queue = read_queue(queue_path, diag) if queue_path else []
    ops = _or_warn(lambda: read_pipeline(sources, diag), [], diag)
    names = {op.op_id: f"Op {op.op_id} {op.op_type}" for op in ops}
    fixed = [(minddata_lane(names[op.op_id], metric), float(value)) for op in ops
             for metric, value in (("workers", op.workers), ("queue capacity", op.capacity))
             if value is not None]
    series = {minddata_lane(names[op.op_id], "queue size"): op.sizes for op in ops if op.capacity is not None}
    stamps: list[Any] = []
    if "cpu" in sources:
        stamps, cpu = _or_warn(lambda: read_cpu(sources["cpu"], names), ([], {}), diag)
        series.update(cpu)
    ticks = _ticks_by_step(stamps, queue, index)
    if ticks is None and any(series.values()):
        diag.note(f"minddata_untimed {rank}", f"rank {rank}: the MindData operators' queue sizes and CPU use "
                  "have no times to place them in steps (no time stamps in the queue file or the CPU file); "
                  "not drawn")
    records = {r.step: r for r in queue}
    for i, step in enumerate(steps):
        at, out = step.start_ns, [Sample(rank, lane, step.start_ns, value) for lane, value in fixed]
        record = records.get(step.step)
        if record is not None:
            out += [Sample(rank, minddata_lane("Data queue", "size"), at, float(record.size)),
                    Sample(rank, minddata_lane("Data queue", "capacity"), at, float(record.capacity))]
        mine = ticks.get(i, ()) if ticks else ()
        for lane, values in series.items() if mine else ():
            taken = [values[t] for t in mine if t < len(values) and isinstance(values[t], (int, float))]
            if taken:
                out.append(Sample(rank, lane, at, sum(taken) / len(taken)))
        yield out


def _or_warn(read: Callable[[], Any], empty: Any, diag: Diagnostics) -> Any:
    try:
        return read()
    except InputError as e:
        diag.warn(f"bad_minddata {e.path.name}", f"{e}; MindData's figures from it left out")
        return empty


def _ticks_by_step(stamps: list[Any], queue: list[QueueRecord],
                   index: dict[int, int]) -> dict[int, list[int]] | None:
    """Step index -> the monitor ticks that belong to it: the step of the last queue record at or
    before the tick (of several at its very time, the first; before any, the first record's), as
    MindInsight's ``_get_minddata_cpu_utilization_steps_info``. None where nothing gives the ticks
    times."""
    timed = sorted(((r.time_ms, r.step) for r in queue if r.time_ms is not None), key=lambda r: r[0])
    if not timed or not stamps:
        return None
    times = [t for t, _ in timed]
    out: dict[int, list[int]] = defaultdict(list)
    for tick, stamp in enumerate(stamps):
        if not isinstance(stamp, (int, float)):
            continue
        at = bisect.bisect_left(times, stamp)  # a record at the tick's very time: the first such
        step = timed[at if at < len(times) and times[at] == stamp else max(0, at - 1)][1]
        if step in index:
            out[index[step]].append(tick)
    return out


def read_queue(path: Path, diag: Diagnostics) -> list[QueueRecord]:
    """The queue records (type 1) of a device queue or dataset iterator file, the first per step."""
    found: dict[int, QueueRecord] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line, text in enumerate(whole_lines(f, path, diag), start=1):
            fields = text.split()
            if not fields or fields[0] != _QUEUE_TYPE:
                continue
            try:
                capacity, step, size = int(fields[1]), int(fields[2]), int(fields[3])
                time_ms = int(fields[4]) if len(fields) > 4 else None
            except (ValueError, IndexError):
                diag.warn("bad_row", f"{path}: line {line}: expected 1 capacity step size [time]; skipped")
                continue
            found.setdefault(step, QueueRecord(step, size, capacity, time_ms))
    return list(found.values())


def read_pipeline(sources: dict[str, Path], diag: Diagnostics) -> list[PipelineOp]:
    """The pipeline's operators, from MindSpore's JSON, else from MindInsight's CSV of it."""
    if "pipeline" in sources:
        ops = jsonfile.load_object(sources["pipeline"]).get("op_info")
        return [op for item in ops if (op := _json_op(item)) is not None] if isinstance(ops, list) else []
    if "pipeline_csv" in sources:
        return _csv_ops(sources["pipeline_csv"], diag)
    return []


def _json_op(item: Any) -> PipelineOp | None:
    if not isinstance(item, dict) or not isinstance(item.get("op_id"), int):
        return None
    queue = (item.get("metrics") or {}).get("output_queue") if isinstance(item.get("metrics"), dict) else None
    workers = item.get("num_workers")
    capacity = queue.get("length") if isinstance(queue, dict) else None
    sizes = queue.get("size") if isinstance(queue, dict) else None
    return PipelineOp(item["op_id"], str(item.get("op_type") or "?"),
                      workers if isinstance(workers, int) else None,
                      capacity if isinstance(capacity, int) else None,
                      sizes if isinstance(sizes, list) else [])


def _csv_ops(path: Path, diag: Diagnostics) -> list[PipelineOp]:
    ops = []
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for line, row in enumerate(csv_rows(csv.DictReader(whole_lines(f, path, diag)), path, diag), start=2):
            try:
                sizes = [int(v) for v in re.findall(r"-?\d+", row.get("output_queue_size") or "")]
                capacity = row.get("output_queue_length") or ""
                workers = row.get("num_workers") or ""
                ops.append(PipelineOp(int(row["op_id"]), row.get("op_type") or "?",
                                      int(workers) if workers else None,
                                      int(capacity) if capacity else None, sizes))
            except (KeyError, TypeError, ValueError):
                diag.warn("bad_row", f"{path}: line {line}: expected op_id, num_workers and "
                          "output_queue_length as numbers; skipped")
    return ops


def read_cpu(path: Path, names: dict[int, str]) -> tuple[list[Any], dict[str, list[Any]]]:
    """(the ticks' time stamps, counter lane -> its value per tick) of the CPU utilization file;
    operator -1 (not a pipeline operator) left out, as MindInsight does."""
    document = jsonfile.load_object(path)
    series: dict[str, list[Any]] = {}
    for key, subject in _CPU.items():
        info = document.get(key)
        for metric, label in _METRICS.items():
            if isinstance(info, dict) and isinstance(info.get(metric), list):
                series[minddata_lane(subject, label)] = info[metric]
    for op in document.get("op_info") or []:
        if not isinstance(op, dict) or not isinstance(op.get("op_id"), int) or op["op_id"] < 0:
            continue
        metrics = op.get("metrics") if isinstance(op.get("metrics"), dict) else {}
        name = names.get(op["op_id"], f"Op {op['op_id']}")
        for metric, label in _METRICS.items():
            if isinstance(metrics.get(metric), list):
                series[minddata_lane(name, f"CPU {label}")] = metrics[metric]
    stamps = document.get("time_stamp")
    return (stamps if isinstance(stamps, list) else []), series
