"""PyTorch's profiler (Kineto): one Chrome trace per rank, ``*.pt.trace.json`` or ``*.json.gz``.

``tensorboard_trace_handler`` names a rank's file ``<worker>.<id>.pt.trace.json``; any number of
them may lie in a folder (and its subfolders), beside other profilers' output. The file is an
object: ``distributedInfo`` (``rank``, ``backend``, process groups) and ``baseTimeNanoseconds``
come before ``traceEvents`` (``jsonfile.header``: the file's first bytes) or after it (PyTorch
2.1-2.5 write the clock base last; a harness that rewrites the file anything: ``jsonfile.trailer``).
``ts`` is µs relative to ``baseTimeNanoseconds`` where that key is present (else epoch µs),
floats with up to 3 decimals: decoded as text and parsed exactly to ns.

Mapping (read by ``chrome_trace`` with the ``Kineto`` dialect; its common kernels, memcpys, memsets
and launches in C, ``InC``, by the rules of ``Kineto.convert``, which reads the rest):
- GPU kernels, memcpy and memset: one lane per device stream (``GPU 0 Stream 7``), their kind
  as the task type (only kernels compute);
- an MTIA's work (``mtia_ccp_events`` of a process ``MTIA N``): one lane per queue (``MTIA 9
  Stream 1 FW``), kernels computing, DMA requests (``dma*``) copies;
- NCCL kernels (``ncclKernel_*``, ``ncclDevKernel_*``) and the GPU kernels that communicate
  without NCCL (SymmetricMemory's ``multimem_*``, vLLM's custom all-reduce, DeepEP's dispatch and
  combine: ``collectives.gpu``): communication ops, on the lane of their process group where the
  kernel's args name it, what each does from its name (``_communication``);
- on CPU backends (gloo), the collectives themselves are the communication ops, drawn as host
  work (no device activity): gloo's own ranges (``gloo:*``, on its worker threads: the collective
  as it ran), where the rank's trace holds any, and the ``c10d::*`` ops that called them are host
  ranges (the call, as a launch is on a GPU: docs/analysis.md §3); without gloo's ranges (mpi, a
  build that records none) the ``c10d::*`` ops are the collectives. A send's or receive's call
  stays a communication op beside its range: only the call names the peer, and the pipeline
  analysis takes the two as one transfer (``analyses.pipeline.transfers_of``);
- CPU ops, Python functions, annotations and CUDA runtime calls: host lanes, one per thread;
  on a CPU run (``deviceProperties`` is there and empty) the CPU ops are the host operators
  (``HOST_OPERATOR``) that ``ops`` counts where there is no device work; each launch is linked
  to its kernel by an arrow, from the ``correlation`` id both carry (the
  ``ac2g`` flow events repeat it and are not read twice);
- steps: ``ProfilerStep#N``, or the user's own ranges with ``--step-marker`` (serving traces have
  none: vLLM's ``execute_model``), numbered in time order; instants become slices of no length.
  Device work goes to the step that launched it (its ``correlation`` id's launch in the step's host
  window), work launched in no step apart; a kernel a ``record_param_comms`` / ``nccl:*`` /
  ``c10d::*`` op launched is that op's collective, whatever its name (``launches``; docs/analysis.md §1);
- memory (``memory``, read apart from the steps as every reader's memory records are): the
  ``[memory]`` instants ``profile_memory=True`` writes, one per allocation (``Bytes`` > 0) or
  release (< 0) of a device (``Device Type``, c10's enum; ``Device Id``), as counters per device
  named as PyTorch names it (``CPU``, ``GPU 0``); ``Total Allocated`` / ``Total Reserved`` where the
  event gives them (PyTorch 1.10 and later: absolute), else the running sum of ``Bytes`` from the
  trace's first event, which is relative: its component says so (``GPU 0 (since the trace
  began)``), as what was allocated before the profiler started is not in the trace. Where ``Addr``
  is given, an allocation and the release of the same address on the same device pair into a slice,
  in time order: at one instant (µs), releases before allocations, whatever their order in the file
  (the allocator reuses a block the moment it is freed; ``_Pairs``).
"""

from __future__ import annotations

import functools
import re
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from ..errors import Diagnostics, UsageError
from ..intervals import NOT_COMPUTE, is_compute
from ..model import (
    COLLECTIVE,
    COMM_GROUP_ARG,
    GPU_KERNEL,
    HOST_OPERATOR,
    MEMORY_SIZE_ARG,
    POINT_TO_POINT,
    RELEASE_NOT_RECORDED,
    Layer,
    RankInfo,
    Sample,
    Slice,
    Step,
    StepRecords,
    allocations_lane,
    checked_ns,
    comm_type,
    memory_counter,
)
from . import chrome_trace, collectives, launches
from ._core import RawEvents, any_named, memory_samples
from .base import Reader
from .chrome_trace import Converted, Dialect
from .common import jsonfile
from .common.events import FLOATS_AS_TEXT, Event, is_profiler_step
from .common.events import batches as event_batches
from .common.lanes import gpu_stream, mtia_lane
from .common.times import us_to_ns

NAME = "kineto"
_FILE = re.compile(r"\.json(\.gz)?$")
_OWN_KEYS = ("distributedInfo", "baseTimeNanoseconds")  # Kineto's; Paddle writes deviceProperties too
_SNIFF_BYTES = 1 << 16
@functools.lru_cache(maxsize=256)
def _shared(ranks: tuple[int, ...]) -> tuple[int, ...]:
    """One tuple for a process group's ranks, whichever rank's header names it: every rank of a
    job lists its groups (the default group: every rank), so n ranks held their own copies, n²
    numbers (4,096 ranks: 16 M, 550 MiB in the driver, tests/test_cluster.py)."""
    return ranks


_FIRST_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?)[,}\s]')
_CAT = re.compile(rb'"cat"\s*:\s*"([^"\\]{1,40})"')
# categories only Kineto writes in an object's events (``libkineto::ActivityType``'s names, and the GPU
# ones of 2021-22, ``_CATS_OF_1_8``: fixtures/public/kineto-2022-hta has neither header key nor name)
_KINETO_CATS = {cat.encode() for cat in (
    "cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy",
    "gpu_memset", "gpu_user_annotation", "ac2g", "mtia_runtime", "mtia_ccp_events", "Kernel", "Runtime",
    "Memcpy", "Memset", "async_gpu")}
_PADDLE = (".paddle_trace.json", ".paddle_trace.json.gz")
# tensorboard_trace_handler's names: <worker>.<ms since the epoch>.pt.trace.json[.gz]
_HANDLER_NAME = re.compile(r"^(?P<worker>.+)\.\d+\.pt\.trace\.json(\.gz)?$")
_DEVICE_CATS = {"kernel": "KERNEL", "gpu_memcpy": "MEMCPY", "gpu_memset": "MEMSET",
                "gpu_user_annotation": NOT_COMPUTE}
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "mtia_runtime")
# an MTIA device's work (its process "MTIA N"): kernels, and DMA requests, which are copies (as HTA
# counts them: its memory kernels are those named dma*)
_MTIA_CAT = "mtia_ccp_events"
# older categories, read as today's: PyTorch 1.8-1.9's (a stream's tid "stream 7", no thread name), and
# 2022's launch arrows (async_gpu, async_cpu_to_gpu: fixtures/public/kineto-2022-hta, HTA's test data)
_CATS_OF_1_8 = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime",
                "Operator": "cpu_op", "async": "ac2g", "async_gpu": "ac2g", "async_cpu_to_gpu": "ac2g"}
_STEP_CATS = ("user_annotation", "cpu_op")
# the categories a launch and a communication op come in, by any generation's name (launches.Survey)
_LAUNCH_CATS_ANY = frozenset({*_LAUNCH_CATS, *(o for o, n in _CATS_OF_1_8.items() if n in _LAUNCH_CATS)})
_OP_CATS_ANY = frozenset({"cpu_op", "user_annotation", *(old for old, new in _CATS_OF_1_8.items()
                                                          if new == "cpu_op")})
_GPU = "GPU stream"  # a route of the dialect's own: a GPU's stream, its lane as ``_stream_lane`` names it
_MTIA = "MTIA queue"  # another: an MTIA device's queue
_DEVICE_ROUTES = (_GPU, _MTIA)
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
    by its name (one cut off or broken is read and said to be so, never passed over), a
    ``*.paddle_trace.json[.gz]`` never (Paddle's, by its name); any other ``*.json`` or
    ``*.json.gz`` (``export_chrome_trace`` takes any name) by a header with Kineto's keys (its own
    ones, or its schemaVersion, a number: Paddle's is a string), or, where the header says neither
    (older exports; a harness's own keys first), by its first events: an object whose
    ``traceEvents`` hold Kineto's categories (torch_npu writes some of them too, in an array)."""
    if not _FILE.search(path.name) or path.name.endswith(_PADDLE):
        return None
    data = jsonfile.first_bytes(path, _SNIFF_BYTES)
    if ".pt.trace.json" in path.name:
        return data
    head = jsonfile.header_of(data)
    if type(head.get("schemaVersion")) is int or any(key in head for key in _OWN_KEYS):
        return data
    if type(head.get("schemaVersion")) is str:
        return None
    events = jsonfile.events_key(data)
    cats = {m[1] for m in _CAT.finditer(data, events)} if events is not None else set()
    return data if cats & _KINETO_CATS else None


def lone_file(path: Path, diag: Diagnostics | None) -> RankInfo | None:
    """A Kineto trace read alone (None if ``path`` is none, by its name and first bytes)."""
    data = _head(path)
    return None if data is None else rank_info(path, data)


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per trace of the folder: its ``distributedInfo.rank``; traces that say no rank
    take, in name order, the ranks after those that do (said in a note). Two traces of one
    worker that say no rank (``tensorboard_trace_handler``'s ``<worker>.<ms>.pt.trace.json``) are
    two runs of one process, never two ranks: an error naming both.

    Raises:
        UsageError: two traces of one worker without a rank.
    """
    infos, unranked = [], []
    for path, data in _traces(folder):  # one trace's first bytes and header at a time: n ranks'
        keys = _keys(path, data)  # headers each list the default group's n ranks (n² held at once)
        infos.append(rank_info(path, data, keys))
        if _rank(keys) is None:
            unranked.append(infos[-1])
    _one_run_per_worker(folder, unranked)
    if unranked:
        taken = {info.rank for info in infos if info not in unranked}
        free = (r for r in range(len(infos) + len(taken)) if r not in taken)
        for info in unranked:
            info.rank = next(free)
        if diag is not None:
            diag.note("kineto_rank", f"{folder}: {len(unranked)} Kineto traces without distributedInfo.rank; "
                      "taken as ranks " + ", ".join(f"{i.rank} ({i.path.name})" for i in unranked))
    return infos


def _one_run_per_worker(folder: Path, unranked: list[RankInfo]) -> None:
    """Refuse two traces of one worker name that say no rank: the handler names a process's
    trace ``<worker>.<ms>`` (``<host>_<pid>`` by default, unique to a process), so two of them are
    two captures of that one process (two runs, or a schedule's repeats), not two ranks."""
    by_worker: dict[str, list[RankInfo]] = {}
    for info in unranked:
        if named := _HANDLER_NAME.match(info.path.name):
            by_worker.setdefault(named["worker"], []).append(info)
    for worker, infos in by_worker.items():
        if len(infos) > 1:
            first, second = sorted(infos, key=lambda i: (i.start_ns or 0, i.path.name))[:2]
            apart = (f", started {(second.start_ns - first.start_ns) / 1e9:.0f} s apart"
                     if first.start_ns is not None and second.start_ns is not None else "")
            raise UsageError(
                f"{folder}: {len(infos)} runs of worker {worker!r}, not ranks of one job: {first.path.name} "
                f"and {second.path.name}{apart}, neither saying a rank (distributedInfo); pass one of the "
                "files, or a folder holding one run")


def rank_info(path: Path, data: bytes | None = None, keys: dict[str, Any] | None = None) -> RankInfo:
    """The rank of one trace, from its keys (rank 0 where they say none) and its first event."""
    data = (_head(path) or b"") if data is None else data
    keys = _keys(path, data) if keys is None else keys
    base = keys.get("baseTimeNanoseconds")
    base = base if type(base) is int else 0
    events = jsonfile.events_key(data)
    first = _FIRST_TS.search(data, events or 0)  # where the JSON writer's origin goes when nothing else says
    try:
        start_ns = checked_ns(base + round(float(first[1]) * 1000)) if first else base or None
    except (ValueError, OverflowError):
        start_ns = None  # not known
    distributed = keys.get("distributedInfo") if isinstance(keys.get("distributedInfo"), dict) else {}
    groups = {}
    for group in distributed.get("pg_config") or ():
        ranks = group.get("ranks") if isinstance(group, dict) else None
        if isinstance(ranks, list) and all(type(r) is int for r in ranks):
            groups[str(group.get("pg_desc") or group.get("pg_name"))] = _shared(tuple(ranks))
    rank = _rank(keys)
    return RankInfo(
        rank=0 if rank is None else rank,
        format=NAME,
        path=path,
        host=keys.get("host_name") if isinstance(keys.get("host_name"), str) else None,
        start_ns=start_ns,
        clock="µs relative to baseTimeNanoseconds" if base else "epoch µs",
        source_paths=(path,),
        clock_offset_ns=base,
        groups=groups,
        device_name=_device_name_of(keys.get("deviceProperties")),
    )


def _keys(path: Path, data: bytes) -> dict[str, Any]:
    """The trace's keys other than ``traceEvents``, wherever they lie: those before the events
    (from its first bytes), and, unless those hold both the rank and the clock, those after them
    (Kineto of PyTorch 2.1-2.5 writes ``baseTimeNanoseconds`` last; a rewritten file anything)."""
    head = jsonfile.header_of(data)
    if "distributedInfo" in head and "baseTimeNanoseconds" in head or data.lstrip()[:1] != b"{":
        return head
    try:
        found = path.stat()
    except OSError:
        return head
    return {**_trailer(path, found.st_size, found.st_mtime_ns), **head}


@functools.lru_cache(maxsize=64)
def _trailer(path: Path, size: int, mtime_ns: int) -> dict[str, Any]:
    """``jsonfile.trailer``, once per version of a file: a ``.gz`` is inflated to its end for it,
    and discovery and the read (in this process, or in workers forked after discovery) both ask."""
    return jsonfile.trailer(path)


def _device_name_of(properties: Any) -> str | None:
    """The devices' names as ``deviceProperties`` gives them (the GPUs of the node), each once."""
    names = [d["name"] for d in properties if isinstance(d, dict) and isinstance(d.get("name"), str)] \
        if isinstance(properties, list) else []
    return ", ".join(dict.fromkeys(names)) or None


def _rank(head: dict[str, Any]) -> int | None:
    distributed = head.get("distributedInfo")
    rank = distributed.get("rank") if isinstance(distributed, dict) else None
    return rank if type(rank) is int and rank >= 0 else None


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True, step_marker: str | None = None,
         memory: _MemoryTo | None = None) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order: ``ProfilerStep#N``, or
    the ranges named ``step_marker`` (``readers.common.markers``) numbered 1, 2, ... in time order.
    ``memory``: where to hand the records ``memory`` gives, as the first pass over each file meets
    its ``[memory]`` events (before the first step is yielded: ``Reader.memory_in_read``)."""
    path = rank.source_paths[0]
    keys = _keys(path, jsonfile.first_bytes(path, _SNIFF_BYTES))
    distributed = keys.get("distributedInfo") if isinstance(keys.get("distributedInfo"), dict) else {}
    dialect = Kineto(str(distributed.get("backend") or ""), host_only=keys.get("deviceProperties") == [])
    dialect.step_marker = step_marker
    dialect.memory_to = None if memory is None else (rank, memory)
    yield from chrome_trace.read_merged(rank, list(rank.source_paths), diag, detail, dialect)


class InCCat(NamedTuple):
    """A category ``_core.read_events`` reads in C (``InC.cats``; read by position: records.h)."""

    name: str  # by any generation's name
    launch: bool  # a launch (else device work)
    kernel: bool  # a kernel (else a launch, memcpy, memset or annotation)
    shown: str  # the record's task type (what a device record does)
    prefix: bytes  # its args' "Task Type" first, as chrome_trace._with_task_type writes it, without "}"
    computes: bool  # whether summary keeps it


class InC(NamedTuple):
    """What ``_core.read_events`` takes of the dialect to read its common device and launch events in C
    by the rules of ``Kineto.convert`` and ``Records._complete`` (read by position: records.h); an
    event whose rule needs Python (a kernel that communicates by its name or that a communication op
    launched, an MTIA's, gloo's, odd args) it leaves to them."""

    cats: tuple[InCCat, ...]
    stream: str  # the route of a GPU stream, whose lane is _stream_lane's
    communicates: dict[str, bool]  # by kernel name: _communication finds it communicates (filled by learn)
    learn: Callable[[str], bool]
    firsts: array | None  # Launches.in_c: the launches' runs, where device work is filed by its launch
    lasts: array | None
    steps: array | None
    collectives: array  # the launches in a communication op
    graphs: set[int]  # graph replays, and those whose kernels ran (Launches.ran)
    replayed: set[int]
    launched: dict[int, list]  # Records.launched: the records filed by their launch, by step index
    flows: str  # why the trace's flow events are left out (_FLOWS)
    launches: bool  # whether launches were surveyed (Kineto.launches): else no step nor ran
    # device work on a thread no metadata names a stream (vLLM's traces hold none): its lane by
    # (pid, tid), as convert draws it (_stream_lane), each made once (filled by C)
    stream_lanes: dict[tuple[Any, Any], str]
    stream_lane: Callable[[Any, Any], str]




class _Args(msgspec.Struct):
    correlation: Any = None
    group: Any = msgspec.field(default=None, name="Process Group Name")
    group_description: Any = msgspec.field(default=None, name="Process Group Description")


_ARGS = msgspec.json.Decoder(_Args)

_Batches = Iterator[list[Event] | RawEvents]
_MemoryTo = Callable[[list[Slice | Sample]], None]  # where a read hands its memory records (MemoryFeed)
_EXECUTION_CATS, _EXECUTION_NAMES = frozenset({"user_annotation"}), ("gloo:",)  # _is_execution's


class Kineto(Dialect):
    """Kineto's traces: lanes by thread (host) and stream (device), kinds by category."""

    events = msgspec.json.Decoder(list[Event], float_hook=str)  # times exact: as text
    by_design = frozenset({_FLOWS})
    flow_events = False  # its arrows are its launches' and device work's correlation ids

    def __init__(self, backend: str, host_only: bool = False) -> None:
        self.collectives_on_host = backend not in ("nccl", "")  # gloo, mpi: the CPU does the work
        self._executions_seen = False  # whether the trace holds gloo's ranges: then a c10d op is a call
        self._survey: launches.Survey | None = None  # the first pass's launches and collectives
        self.launches: launches.Launches | None = None  # then, by correlation id
        self._steps = False  # whether device work is filed by its launch: the trace marks steps
        self._communicates: dict[str, bool] = {}  # kernel names: whether they communicate (InC)
        self._stream_lanes: dict[tuple[Any, Any], str] = {}  # InC.stream_lanes
        cats = {*_DEVICE_CATS, *_LAUNCH_CATS, _MTIA_CAT, "ac2g"}
        if self.collectives_on_host:
            cats |= {"cpu_op", "user_annotation"}
        if host_only:  # a CPU run: its CPU ops are its operators (Python marks them; a GPU run's are many)
            cats |= {"cpu_op"}
        self.python_cats = frozenset(cats | {old for old, new in _CATS_OF_1_8.items() if new in cats})
        # where to hand each file's [memory] records, as ``memory`` makes them, as the first pass over
        # the file (``batches``' first for it) meets them: the file scanned once for both (``read``)
        self.memory_to: tuple[RankInfo, _MemoryTo] | None = None
        self._memory_met: set[Path] = set()  # the files whose memory records were handed on

    def step_number(self, event: Event, kind: Layer | str) -> int | None:
        """``ProfilerStep#N`` ranges on the host (their copies on the GPU are no steps): user
        annotations, or operators in PyTorch 1.8-1.9."""
        if _category(event) in _STEP_CATS and is_profiler_step(event.name):
            return int(event.name[13:])
        return None

    def route(self, process: str, thread: str, pid: Any, tid: Any) -> chrome_trace.Route:
        if thread.startswith("stream ") or str(tid).startswith("stream "):  # a GPU stream: events by category
            return chrome_trace.Route(_GPU, _stream_lane(pid, tid))
        if process.startswith("MTIA "):  # an MTIA device: its queues ("Stream 1 FW", "DMA_REQUEST")
            return chrome_trace.Route(_MTIA, mtia_lane(process, thread.strip() or f"Stream {tid}"))
        if type(pid) is not int:  # the profiler's own spans and markers ("Spans", "Traces", "")
            named = " ".join(str(part) for part in (pid, tid) if part != "")
            return chrome_trace.Route(Layer.HOST, named or "Profiler")
        return chrome_trace.Route(Layer.HOST, thread.strip() or f"thread {tid}")

    def batches(self, path: Path, diag: Diagnostics) -> Iterator[list[Event] | RawEvents]:
        """Scanned in C where plain (``_core.scan``), as ``events`` decodes them: no object made for
        what is left out (``chrome_trace.c``, ``survey.c`` read the rest from the text)."""
        found = event_batches(path, diag, self.events, chrome_trace.BATCH_BYTES, scanned=FLOATS_AS_TEXT)
        if self.memory_to is None or path in self._memory_met:
            return found
        self._memory_met.add(path)
        return self._with_memory(found, path, diag, *self.memory_to)

    @staticmethod
    def _with_memory(batches: _Batches, path: Path, diag: Diagnostics, rank: RankInfo,
                     to: _MemoryTo) -> _Batches:
        found = _MemoryPass(rank)
        for batch in batches:
            to(list(found.batch(batch)))
            yield batch
        to(list(found.end(path, diag)))

    def survey(self, events: list[Event] | RawEvents, rank: RankInfo) -> None:
        if self.collectives_on_host and not self._executions_seen:
            self._executions_seen = (any_named(events, _EXECUTION_CATS, _EXECUTION_NAMES)  # in C, by its rule
                                     if type(events) is RawEvents else any(_is_execution(e) for e in events))
        if self._survey is None:
            self._survey = launches.Survey(rank.clock_offset_ns, _LAUNCH_CATS_ANY, _OP_CATS_ANY)
        self._survey.add(events)

    def steps_known(self, steps: list[Step], diag: Diagnostics) -> None:
        if self._survey is not None:
            self.launches = self._survey.launches(steps)
            self._steps = bool(steps)

    def finish(self, rank: RankInfo, diag: Diagnostics) -> None:
        if self.launches is not None and (empty := self.launches.empty_replays()):
            diag.note(f"graph_replays {rank.rank}", f"{rank.path}: {empty} CUDA graph replays "
                      "(cudaGraphLaunch) of which the trace holds no kernel: their device work is not in it "
                      "(profile with the graph's kernels traced to see it)")

    def in_c(self, launched: dict[int, list]) -> InC:
        found = self.launches
        filing = found is not None and self._steps and found.filed
        firsts, lasts, steps, collectives, graphs, replayed = (
            found.in_c(filing) if found is not None else (None, None, None, array("q"), set(), set()))
        return InC(_IN_C_CATS, _GPU, self._communicates, self._learn, firsts, lasts, steps, collectives,
                   graphs, replayed, launched, _FLOWS, found is not None, self._stream_lanes, _stream_lane)

    def _learn(self, name: str) -> bool:
        communicates = self._communicates[name] = _communication(name) is not None
        return communicates

    def convert(self, event: Event, kind: Layer | str, lane: str) -> Converted | str:
        cat, name = _category(event), event.name
        if event.ph in ("s", "f", "t"):
            return _FLOWS
        if cat == _MTIA_CAT:
            args = _args(event)
            flow = (f"launch:{args.correlation}", False) if args.correlation is not None else None
            copies = isinstance(name, str) and name.startswith("dma")
            on = lane if kind in _DEVICE_ROUTES else mtia_lane(str(event.pid), f"Stream {event.tid}")
            return Converted(Layer.STREAM, on, name, "MEMCPY" if copies else "KERNEL", flow,
                             meaning="" if copies else GPU_KERNEL)
        if cat in _DEVICE_CATS:
            args = _args(event)
            flow = (f"launch:{args.correlation}", False) if args.correlation is not None else None
            converted = _device_work(event, cat, args, flow, self._step_of(args))
            return self._by_launch(event, cat, args, converted)
        if cat in _LAUNCH_CATS:
            args = _args(event)
            flow = (f"launch:{args.correlation}", True) if args.correlation is not None else None
            return Converted(Layer.HOST, lane, name, "", flow)
        calls = cat == "cpu_op" and type(name) is str and name.startswith("c10d::")
        if calls and self._executions_seen and collectives.host(name) not in POINT_TO_POINT:
            return Converted(Layer.HOST, lane, name, "")  # the call of a collective gloo's range shows run
        if calls or _is_execution(event):
            return Converted(Layer.COMM_OP, "Collectives (c10d)" if calls else "Collectives (gloo)",
                             name, "", None, on_device=False, meaning=collectives.host(name) or COLLECTIVE)
        if kind in _DEVICE_ROUTES:  # on a stream, of a category not known to compute
            return Converted(Layer.STREAM, lane, name, NOT_COMPUTE)
        return Converted(Layer.HOST, lane, name, HOST_OPERATOR if cat == "cpu_op" else "")


    def _step_of(self, args: _Args) -> int | None:
        """The index of the step that launched a device record (or OUTSIDE); None: filed by its
        time (a trace without steps or launches, a record without a correlation id: annotations)."""
        found = self.launches
        if found is None or args.correlation is None:
            return None
        found.ran(args.correlation)
        return found.step(args.correlation) if self._steps and found.filed else None

    def _by_launch(self, event: Event, cat: str, args: _Args, converted: Converted) -> Converted:
        """A kernel a communication op launched (``launches``) drawn as that op's collective, its
        kind and the op's args taking precedence over what the kernel's own event says."""
        found = self.launches
        collective = found.collective(args.correlation) if found is not None and cat == "kernel" else None
        if collective is None:
            return converted
        group = (collective.args.get("Process Group Description") or collective.args.get(COMM_GROUP_ARG)
                 or args.group_description or args.group)
        lane = f"Group {group} Communication" if group else "NCCL"
        # where the op says no kind, the kernel's name's, but for point-to-point: SendRecv kernels
        # run all-to-alls and gathers too, which only the launching op tells apart
        by_name = converted.layer is Layer.COMM_OP
        named = converted.meaning if by_name and converted.meaning not in POINT_TO_POINT else None
        return converted._replace(layer=Layer.COMM_OP, lane=lane,
                                  task_type=converted.task_type if by_name else "NCCL",
                                  meaning=comm_type(collective.kind or named or COLLECTIVE),
                                  args=launches.with_collective(event.args, collective))


def _device_work(event: Event, cat: str, args: _Args, flow: tuple[str, bool] | None,
                 step: int | None) -> Converted:
    """A kernel, memcpy or memset as its own event says it, filed under ``step`` (``Converted.step``):
    a kernel that communicates by its name (``_communication``) a communication op, on the lane of its
    process group where the kernel's args name it."""
    name = event.name
    if cat == "kernel" and (communicates := _communication(name)) is not None:
        group = args.group_description or args.group
        shown, lane, meaning = communicates
        return Converted(Layer.COMM_OP, f"Group {group} Communication" if group else lane, name, shown, flow,
                         True, step, meaning=meaning)
    lane = _stream_lane(event.pid, event.tid)
    return Converted(Layer.STREAM, lane, name, _DEVICE_CATS[cat], flow, True, step,
                     meaning=GPU_KERNEL if cat == "kernel" else "")


def _communication(name: Any) -> tuple[str, str, str] | None:
    """A kernel that communicates, by its name: (the Task Type it shows, its lane where its args
    name no process group, what it does: ``model.comm_type``); None for a kernel that computes.
    NCCL's show ``NCCL`` on the ``NCCL`` lane (as they always have); the others stay kernels."""
    if not isinstance(name, str):
        return None
    if (kind := collectives.nccl(name)) is not None:
        return "NCCL", "NCCL", comm_type(kind)
    if (kind := collectives.gpu(name)) is not None:
        return _DEVICE_CATS["kernel"], "GPU Communication", comm_type(kind)
    return None


def _is_execution(event: Event) -> bool:
    """Whether the event is a collective as gloo's worker thread ran it (``gloo:all_reduce``)."""
    name = event.name
    return _category(event) == "user_annotation" and type(name) is str and name.startswith("gloo:")


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


def _in_c_cats() -> tuple[InCCat, ...]:
    """InC.cats: the device and launch categories, by every generation's name, as convert and
    Records._complete make their records (the args' "Task Type" first: chrome_trace._with_task_type)."""
    cats = []
    for cat in (*_DEVICE_CATS, *_LAUNCH_CATS, *_CATS_OF_1_8):
        new = _CATS_OF_1_8.get(cat, cat)
        if new == "mtia_runtime":  # an MTIA's: Python's
            continue
        if new in _LAUNCH_CATS:
            cats.append(InCCat(cat, True, False, "", b"", False))
        elif new in _DEVICE_CATS:
            shown = GPU_KERNEL if new == "kernel" else _DEVICE_CATS[new]
            cats.append(InCCat(cat, False, new == "kernel", shown,
                         b'{"Task Type":' + msgspec.json.encode(_DEVICE_CATS[new]), is_compute(shown)))
    return tuple(cats)


_IN_C_CATS = _in_c_cats()


# -- memory ---------------------------------------------------------------------------------------

MEMORY_EVENT = "[memory]"
SINCE_START = " (since the trace began)"  # a device whose counter is the running sum of its deltas
# c10::DeviceType's values as PyTorch names the devices (CUDA and HIP are GPUs); others by number
_DEVICE_TYPES = {0: "CPU", 1: "GPU", 6: "GPU", 12: "XPU", 13: "MPS", 15: "HPU", 19: "MTIA", 20: "PrivateUse1"}


class _MemoryArgs(msgspec.Struct):
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    addr: Any = msgspec.field(default=None, name="Addr")
    size: Any = msgspec.field(default=None, name="Bytes")
    allocated: Any = msgspec.field(default=None, name="Total Allocated")
    reserved: Any = msgspec.field(default=None, name="Total Reserved")


_MEMORY_ARGS = msgspec.json.Decoder(_MemoryArgs)
_KINETO_EVENT = msgspec.json.Decoder(Event, float_hook=str)  # one event, as Kineto.events decodes it


def memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Slice | Sample]:
    """The rank's ``[memory]`` events as counters per device and, where they give ``Addr``, the
    allocations as slices (docs/formats.md §6.3). One pass over the trace, flat: the counters are
    yielded as read, in the file's order (Kineto's is time order; a file that is not is said, as
    its running sums are then in file order); only the allocations not released yet are kept."""
    for path in rank.source_paths:
        yield from _memory(rank, path, diag)


def _memory(rank: RankInfo, path: Path, diag: Diagnostics) -> Iterator[Slice | Sample]:
    if not _mentions(path, b'"' + MEMORY_EVENT.encode() + b'"'):
        return  # most traces: a byte search costs a tenth of decoding their events
    found = _MemoryPass(rank)
    for batch in event_batches(path, diag, Kineto.events, chrome_trace.BATCH_BYTES, scanned=FLOATS_AS_TEXT):
        yield from found.batch(batch)
    yield from found.end(path, diag)


class _MemoryPass:
    """One file's ``[memory]`` events in its order, made into counters per device and allocations,
    a batch at a time (``batch``), then the allocations still held and what was odd (``end``).
    ``event`` is the rule; ``scanned`` makes a scanned batch's plain events in C
    (``_core.memory_samples``, with this pass's own dicts) and the rest by the rule."""

    def __init__(self, rank: RankInfo) -> None:
        self.rank = rank
        self.running: dict[str, float] = {}  # device -> the sum of its deltas so far
        self.last_ns: dict[str, int] = {}  # device -> its last event's time
        # (Device Type, Device Id), both ints -> (device, its component since the trace began, and
        # the lanes: Allocated, Reserved, Allocated since the trace began): the devices C has seen
        self.lanes: dict[tuple[int, int], tuple[str, str, str, str, str]] = {}
        self.pairs = _Pairs(rank)
        self.bad = self.disordered = 0

    def batch(self, batch: list[Event] | RawEvents) -> Iterator[Slice | Sample]:
        if type(batch) is RawEvents:
            yield from self.scanned(batch)
        else:
            for event in batch:
                if event.name == MEMORY_EVENT:
                    yield from self.event(event)

    def end(self, path: Path, diag: Diagnostics) -> Iterator[Slice]:
        """The allocations not released by the file's end, and the warnings of what was odd."""
        yield from self.pairs.end(max(self.last_ns.values(), default=0))
        if self.pairs.unseen:
            diag.warn("memory_pairs", f"{path}: {self.pairs.unseen} allocations' addresses were allocated "
                      "again with no release recorded between: each is drawn up to then, its release time "
                      "unknown")
        if self.bad:
            diag.warn("bad_event", f"{path}: {self.bad} {MEMORY_EVENT} events without a time or a number of "
                      "Bytes; skipped")
        if self.disordered:
            diag.note("memory_order", f"{path}: {self.disordered} {MEMORY_EVENT} events earlier than the one "
                      "before them on their device: running sums are taken in the file's order")

    def scanned(self, batch: RawEvents) -> Iterator[Slice | Sample]:
        at: int | None = 0
        while at is not None:
            made: list[Sample | tuple[str, int, int, float]] = []  # samples and allocations, in event order
            at, item, disordered = memory_samples(
                batch, at, MEMORY_EVENT, self.rank.rank, self.rank.clock_offset_ns, Sample, self.lanes,
                self.running, self.last_ns, made)
            self.disordered += disordered
            for record in made:
                if type(record) is tuple:  # an allocation to pair (a Sample is a NamedTuple)
                    yield from self.pairs.add(*record)
                else:
                    yield record
            if item is not None:
                yield from self.event(item)

    def event(self, event: tuple | Event | bytes) -> Iterator[Slice | Sample]:
        """One event: (ts, *_MemoryArgs' fields) as ``memory_events`` picks it, its text, or the Event."""
        try:
            ts, device_type, device_id, addr, size, allocated, reserved = (
                event if type(event) is tuple else _memory_fields(event))
            ts_ns = checked_ns(us_to_ns(ts) + self.rank.clock_offset_ns)
            size = _number(size)
        except (TypeError, ValueError, ArithmeticError, msgspec.DecodeError, msgspec.ValidationError):
            self.bad += 1
            return
        device = _device_name(device_type, device_id)
        if type(device_type) is int and type(device_id) is int:
            since = device + SINCE_START
            self.lanes[device_type, device_id] = (
                device, since, memory_counter(device, "Allocated"), memory_counter(device, "Reserved"),
                memory_counter(since, "Allocated"))
        absolute = _number(allocated, None) is not None or _number(reserved, None) is not None
        component = device if absolute else device + SINCE_START
        self.disordered += ts_ns < self.last_ns.get(device, ts_ns)
        self.last_ns[device] = ts_ns
        if absolute:
            for kind, value in (("Allocated", allocated), ("Reserved", reserved)):
                if (value := _number(value, None)) is not None:
                    yield Sample(self.rank.rank, memory_counter(component, kind), ts_ns, value)
        else:
            self.running[device] = total = self.running.get(device, 0.0) + size
            yield Sample(self.rank.rank, memory_counter(component, "Allocated"), ts_ns, total)
        if type(addr) is int and size:
            yield from self.pairs.add(component, addr, ts_ns, size)


def _memory_fields(event: Event | bytes) -> tuple:
    """(ts, *_MemoryArgs' fields) of an event, or of its text, as ``Kineto.events`` decodes it."""
    if type(event) is bytes:
        event = _KINETO_EVENT.decode(event)
    args = _MEMORY_ARGS.decode(event.args) if event.args else _MemoryArgs()
    return (event.ts, *msgspec.structs.astuple(args))


def _mentions(path: Path, text: bytes, chunk: int = 1 << 22) -> bool:
    """Whether the file's (uncompressed) bytes hold ``text``, read a chunk at a time."""
    with jsonfile.open_bytes(path) as f:
        tail = b""
        while data := f.read(chunk):
            if text in tail + data[:len(text)] or text in data:
                return True
            tail = data[-len(text):]
    return False


class _Pairs:
    """Allocations paired with the releases of their addresses, in time order. The events of one
    instant are held until the next instant begins, then paired releases first: PyTorch writes a
    block's release and its reuse at the same µs in either order. An allocation waits for its
    release; a release ends the allocation of its address, if the trace saw it (a release of memory
    allocated before the trace began pairs with none); an allocation at an address still held
    (its release not recorded) ends the one before, whose release time is unknown (``unseen``)."""

    def __init__(self, rank: RankInfo) -> None:
        self.rank = rank
        self.live: dict[tuple[str, int], tuple[int, float]] = {}  # (component, address) -> (at, size)
        self.instant: list[tuple[str, int, int, float]] = []  # (component, address, ts, size) of one µs
        self.unseen = 0

    def add(self, component: str, addr: int, ts_ns: int, size: float) -> Iterator[Slice]:
        if self.instant and self.instant[0][2] != ts_ns:
            yield from self._pair()
        self.instant.append((component, addr, ts_ns, size))

    def end(self, end_ns: int) -> Iterator[Slice]:
        """The last instant's pairs, then the allocations never released, lasting to ``end_ns``."""
        yield from self._pair()
        for (component, addr), (start_ns, size) in self.live.items():
            yield _allocation(self.rank, component, addr, start_ns, end_ns - start_ns, size,
                              {"Released": False})

    def _pair(self) -> Iterator[Slice]:
        instant, self.instant = self.instant, []
        for component, addr, ts_ns, size in sorted(instant, key=lambda event: event[3] > 0):  # stable
            held = self.live.pop((component, addr), None)
            if held is not None:
                start_ns, allocated = held
                args = {} if size < 0 else {"Released": RELEASE_NOT_RECORDED}  # allocated again: gone by then
                self.unseen += size > 0
                yield _allocation(self.rank, component, addr, start_ns, ts_ns - start_ns, allocated, args)
            if size > 0:
                self.live[component, addr] = (ts_ns, size)


def _allocation(rank: RankInfo, component: str, addr: int, start_ns: int, dur_ns: int, size: float,
                args: dict) -> Slice:
    return Slice(rank.rank, Layer.MEMORY, allocations_lane(component), f"0x{addr:x}", start_ns, dur_ns,
                 {MEMORY_SIZE_ARG: size, **args})


_NUMBER_LIMIT = 1 << 1023  # a float's range (a constant: Python computes 1 << 1023 where it is written)


def _number(value: Any, default: Any = ...) -> Any:
    """A JSON number as a float; ``default`` for anything else (none given: ValueError)."""
    if type(value) in (int, float) and abs(value) < _NUMBER_LIMIT:
        return float(value)
    if default is ...:
        raise ValueError(value)
    return default


def _device_name(device_type: Any, device_id: Any) -> str:
    """``CPU``, ``GPU 0``: the device as PyTorch names it (the CPU has no index: Kineto writes -1)."""
    try:
        name = _DEVICE_TYPES.get(device_type)
    except TypeError:  # an array or object (unhashable): no c10 device type
        name = None
    name = name or f"Device type {device_type}"  # any other named as written
    return name if name == "CPU" or type(device_id) is not int or device_id < 0 else f"{name} {device_id}"


READER = Reader(
    name=NAME,
    folder="PyTorch profiler traces *.pt.trace.json, or *.json[.gz] with Kineto's header",
    sniff=sniff, rank_infos=rank_infos, read=read,
    files=True,  # reads the files of a folder, not the folder: its subfolders are walked on
    lone_files=("a PyTorch profiler trace",), lone_file=lone_file,
    step_marker=True,  # ``read`` takes the user's annotation as the step (--step-marker)
    memory=memory, memory_from="[memory] events: they are written with profile_memory=True",
    memory_in_read=True,  # a detail read hands its [memory] records on from its first pass (MemoryFeed)
    host_ops_in_detail=True,  # a CPU run's CPU ops, drawn in detail only: its operator statistics
)
