"""PyTorch's profiler (Kineto): one Chrome trace per rank, ``*.pt.trace.json`` or ``*.json.gz``.

``tensorboard_trace_handler`` names a rank's file ``<worker>.<id>.pt.trace.json``; any number of
them may lie in a folder (and its subfolders), beside other profilers' output. The file is an
object: ``distributedInfo`` (``rank``, ``backend``, process groups) and ``baseTimeNanoseconds``
come before ``traceEvents``, so a rank is known from the file's first bytes (``jsonfile.header``).
``ts`` is µs relative to ``baseTimeNanoseconds`` where that key is present (else epoch µs),
floats with up to 3 decimals: decoded as text and parsed exactly to ns.

Mapping (read by ``chrome_trace`` with the ``Kineto`` dialect):
- GPU kernels, memcpy and memset: one lane per device stream (``GPU 0 Stream 7``), their kind
  as the task type (only kernels compute);
- NCCL kernels (``ncclKernel_*``, ``ncclDevKernel_*``): communication ops, on the lane of their
  process group where the kernel's args name it;
- on CPU backends (gloo), the collectives themselves (``c10d::*`` ops, ``gloo:*`` ranges) are
  the communication ops, drawn as host work (no device activity);
- CPU ops, Python functions, annotations and CUDA runtime calls: host lanes, one per thread;
  each launch is linked to its kernel by an arrow, from the ``correlation`` id both carry (the
  ``ac2g`` flow events repeat it and are not read twice);
- steps: ``ProfilerStep#N``; instants become slices of no length.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from ..errors import Diagnostics
from ..model import Layer, RankInfo, StepRecords, checked_ns
from ..overlap import NOT_COMPUTE
from . import chrome_trace, jsonfile
from .chrome_trace import Converted, Dialect
from .events import Event, is_profiler_step
from .lanes import gpu_stream

NAME = "kineto"
FILES = True  # reads the files of a folder, not the folder: its subfolders are walked on
FOLDER = "PyTorch profiler traces *.pt.trace.json, or *.json[.gz] with Kineto's header"
LONE_FILES = ("a PyTorch profiler trace",)
_FILE = re.compile(r"\.json(\.gz)?$")
_OWN_KEYS = ("distributedInfo", "baseTimeNanoseconds")  # Kineto's; Paddle writes deviceProperties too
_SNIFF_BYTES = 1 << 16
_FIRST_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?)[,}\s]')
_DEVICE_CATS = {"kernel": "KERNEL", "gpu_memcpy": "MEMCPY", "gpu_memset": "MEMSET",
                "gpu_user_annotation": NOT_COMPUTE}
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
# PyTorch 1.8-1.9 wrote the categories by other names (and a stream's tid as "stream 7", without
# a thread name): read as today's
_CATS_OF_1_8 = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime",
                "Operator": "cpu_op", "async": "ac2g"}
_NCCL = ("ncclKernel", "ncclDevKernel")
_STEP_CATS = ("user_annotation", "cpu_op")
_GPU = "GPU stream"  # a route of the dialect's own
_FLOWS = "ac2g flow ends, drawn from the correlation ids of launches and kernels they repeat"


def sniff(folder: Path) -> bool:
    """A folder holding at least one Kineto trace."""
    return any(True for _ in _traces(folder))


def _traces(folder: Path) -> Iterator[tuple[Path, bytes]]:
    """The folder's Kineto traces (not its subfolders') with their first bytes, in name order."""
    for path in sorted(folder.iterdir()):
        if path.is_file() and (head := _head(path)) is not None:
            yield path, head


def _head(path: Path) -> bytes | None:
    """The first bytes of a Kineto trace; None if ``path`` is none. A ``*.pt.trace.json`` is one
    by its name (one cut off or broken is read and said to be so, never passed over); any other
    ``*.json`` or ``*.json.gz`` (``export_chrome_trace`` takes any name) by a header with Kineto's
    keys: its own ones, or its schemaVersion, a number (Paddle's is a string)."""
    if not _FILE.search(path.name):
        return None
    data = jsonfile.first_bytes(path, _SNIFF_BYTES)
    head = jsonfile.header_of(data)
    named = ".pt.trace.json" in path.name
    kineto = type(head.get("schemaVersion")) is int or any(key in head for key in _OWN_KEYS)
    return data if named or kineto else None


def lone_file(path: Path, diag: Diagnostics | None) -> RankInfo | None:
    """A Kineto trace read alone (None if ``path`` is none, by its name and first bytes)."""
    data = _head(path)
    return None if data is None else rank_info(path, data)


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per trace of the folder: its ``distributedInfo.rank``; traces that say no rank
    take, in name order, the ranks after those that do (said in a note)."""
    found = list(_traces(folder))
    infos = [rank_info(path, data) for path, data in found]
    unranked = [info for info, (_, data) in zip(infos, found, strict=True)
                if _rank(jsonfile.header_of(data)) is None]
    if unranked:
        taken = {info.rank for info in infos if info not in unranked}
        free = (r for r in range(len(infos) + len(taken)) if r not in taken)
        for info in unranked:
            info.rank = next(free)
        if diag is not None:
            diag.note("kineto_rank", f"{folder}: {len(unranked)} Kineto traces without distributedInfo.rank; "
                      "taken as ranks " + ", ".join(f"{i.rank} ({i.path.name})" for i in unranked))
    return infos


def rank_info(path: Path, data: bytes | None = None) -> RankInfo:
    """The rank of one trace, from its first bytes (rank 0 where they say none)."""
    data = (_head(path) or b"") if data is None else data
    head = jsonfile.header_of(data)
    base = head.get("baseTimeNanoseconds")
    base = base if type(base) is int else 0
    first = _FIRST_TS.search(data)  # where the JSON writer's origin goes when nothing else says
    try:
        start_ns = checked_ns(base + round(float(first[1]) * 1000)) if first else base or None
    except (ValueError, OverflowError):
        start_ns = None  # not known
    distributed = head.get("distributedInfo") if isinstance(head.get("distributedInfo"), dict) else {}
    groups = {}
    for group in distributed.get("pg_config") or ():
        ranks = group.get("ranks") if isinstance(group, dict) else None
        if isinstance(ranks, list) and all(type(r) is int for r in ranks):
            groups[str(group.get("pg_desc") or group.get("pg_name"))] = tuple(ranks)
    rank = _rank(head)
    return RankInfo(
        rank=0 if rank is None else rank,
        format=NAME,
        path=path,
        host=head.get("host_name") if isinstance(head.get("host_name"), str) else None,
        start_ns=start_ns,
        clock="µs relative to baseTimeNanoseconds" if base else "epoch µs",
        source_paths=(path,),
        clock_offset_ns=base,
        groups=groups,
    )


def _rank(head: dict[str, Any]) -> int | None:
    distributed = head.get("distributedInfo")
    rank = distributed.get("rank") if isinstance(distributed, dict) else None
    return rank if type(rank) is int and rank >= 0 else None


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order."""
    head = jsonfile.header(rank.source_paths[0], _SNIFF_BYTES)
    distributed = head.get("distributedInfo") if isinstance(head.get("distributedInfo"), dict) else {}
    dialect = Kineto(str(distributed.get("backend") or ""))
    yield from chrome_trace.read_merged(rank, list(rank.source_paths), diag, detail, dialect)


class _Args(msgspec.Struct):
    correlation: Any = None
    group: Any = msgspec.field(default=None, name="Process Group Name")
    group_description: Any = msgspec.field(default=None, name="Process Group Description")


_ARGS = msgspec.json.Decoder(_Args)


class Kineto(Dialect):
    """Kineto's traces: lanes by thread (host) and stream (device), kinds by category."""

    events = msgspec.json.Decoder(list[Event], float_hook=str)  # times exact: as text
    by_design = frozenset({_FLOWS})

    def __init__(self, backend: str) -> None:
        self.collectives_on_host = backend not in ("nccl", "")  # gloo, mpi: the CPU does the work
        cats = {*_DEVICE_CATS, *_LAUNCH_CATS, "ac2g"}
        if self.collectives_on_host:
            cats |= {"cpu_op", "user_annotation"}
        self.python_cats = frozenset(cats | {old for old, new in _CATS_OF_1_8.items() if new in cats})

    def step_number(self, event: Event, kind: Layer | str) -> int | None:
        """``ProfilerStep#N`` ranges on the host (their copies on the GPU are no steps): user
        annotations, or operators in PyTorch 1.8-1.9."""
        if _category(event) in _STEP_CATS and is_profiler_step(event.name):
            return int(event.name[13:])
        return None

    def route(self, process: str, thread: str, pid: Any, tid: Any) -> chrome_trace.Route:
        if thread.startswith("stream ") or str(tid).startswith("stream "):  # a GPU stream: events by category
            return chrome_trace.Route(_GPU, _stream_lane(pid, tid))
        if type(pid) is not int:  # the profiler's own spans and markers ("Spans", "Traces", "")
            named = " ".join(str(part) for part in (pid, tid) if part != "")
            return chrome_trace.Route(Layer.HOST, named or "Profiler")
        return chrome_trace.Route(Layer.HOST, thread.strip() or f"thread {tid}")

    def convert(self, event: Event, kind: Layer | str, lane: str) -> Converted | str:
        cat, name = _category(event), event.name
        if event.ph in ("s", "f", "t"):
            return _FLOWS
        if cat in _DEVICE_CATS:
            args = _args(event)
            flow = (f"launch:{args.correlation}", False) if args.correlation is not None else None
            if cat == "kernel" and isinstance(name, str) and name.startswith(_NCCL):
                group = args.group_description or args.group
                return Converted(Layer.COMM_OP, f"Group {group} Communication" if group else "NCCL",
                                 name, "NCCL", flow)
            return Converted(Layer.STREAM, _stream_lane(event.pid, event.tid), name, _DEVICE_CATS[cat], flow)
        if cat in _LAUNCH_CATS:
            args = _args(event)
            flow = (f"launch:{args.correlation}", True) if args.correlation is not None else None
            return Converted(Layer.HOST, lane, name, "", flow)
        if isinstance(name, str) and ((cat == "cpu_op" and name.startswith("c10d::")) or
                                      (cat == "user_annotation" and name.startswith("gloo:"))):
            return Converted(Layer.COMM_OP, "Collectives (c10d)" if cat == "cpu_op" else "Collectives (gloo)",
                             name, "", None, on_device=False)
        if kind is _GPU:  # on a stream, of a category not known to compute
            return Converted(Layer.STREAM, lane, name, NOT_COMPUTE)
        return Converted(Layer.HOST, lane, name)


def _category(event: Event) -> Any:
    """The event's category by today's name."""
    return _CATS_OF_1_8.get(event.cat, event.cat) if type(event.cat) is str else event.cat


def _stream_lane(pid: Any, tid: Any) -> str:
    """``GPU 0 Stream 7`` for stream 7 of device 0, whose tid is 7 (or "stream 7" before PyTorch 1.10)."""
    return gpu_stream(pid, str(tid).removeprefix("stream "))


def _args(event: Event) -> _Args:
    try:
        return _ARGS.decode(event.args) if event.args else _Args()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return _Args()
