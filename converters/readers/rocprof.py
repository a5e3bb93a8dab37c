"""AMD's rocprofv3 JSON (``--output-format json``: ``<pid>_results.json``; docs/formats.md §12).

One object ``{"rocprofiler-sdk-tool": [{metadata, agents, ..., strings, kernel_symbols, ...,
buffer_records}]}``, one process each: ``agents`` (CPUs type 1, GPUs type 2 with ``gpu_index``),
``kernel_symbols`` (a kernel's names by ``kernel_id``), ``strings.buffer_records`` (each record
kind's operation names by number), ``strings.marker_api`` (rocTX messages by correlation id), then
``buffer_records``: ``kernel_dispatch``, ``memory_copy``, the host APIs (``hip_api``, ``hsa_api``,
``rccl_api``, ``marker_api``) and others. Times are ns on the profiler's own clock (not the epoch:
``metadata.init_time`` is on it too), so a rank is on its own clock (``wall_clock`` False).

Read in one pass in flat memory (``_sections``): the names come before the records, as rocprofv3
writes them; held are the names (one per kernel symbol), the rocTX ranges of a ``--step-marker``
and, until each step is yielded, the records (filed on disk by time, ``spill.ByTime``). Kernels are
``GPU <gpu_index> Queue <queue>`` lanes; RCCL's a communication op (``collectives.nccl``: the
generic kernel of RCCL says no type, ``COLLECTIVE``, unless the file holds the RCCL call that
launched it: ``RcclCalls``); copies ``MEMCPY`` tasks on their GPU's
``Copies`` lane; host APIs and rocTX ranges host ranges on their thread; a host call and the device
work of its correlation id are joined by an arrow.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import Diagnostics, InputError
from ..model import (
    COLLECTIVE,
    GPU_KERNEL,
    RECV,
    SEND,
    SENDRECV,
    FlowEnd,
    Layer,
    RankInfo,
    Slice,
    Step,
    StepRecords,
    checked_id,
    checked_ns,
    comm_type,
)
from . import collectives
from .base import Reader
from .common import flows, markers
from .common.args import as_json
from .common.jsonfile import first_bytes, open_bytes
from .common.parts import PART_WINDOW_NS, Parts, in_parts
from .common.spill import WINDOW_NS, ByTime, StepSpill

NAME = "rocprof"
CLOCK = "rocprofv3's timestamps (ns on the profiler's own clock, not the epoch)"
_TOOL = "rocprofiler-sdk-tool"
_HEAD = 1 << 16
_GPU = 2  # an agent's type: 1 CPU, 2 GPU
_HOST_APIS = ("hip_api", "hsa_api", "rccl_api", "marker_api")
_ARRAYS = {  # the arrays read, by where they lie (keys from the tool's object), under a short name
    ("agents",): "agents", ("kernel_symbols",): "symbols", ("strings", "buffer_records"): "kinds",
    ("strings", "marker_api"): "messages", ("buffer_records", "kernel_dispatch"): "kernel_dispatch",
    ("buffer_records", "memory_copy"): "memory_copy",
    **{("buffer_records", api): api for api in _HOST_APIS},
}
_BATCH_BYTES = 1 << 20
_MAX_DEPTH = 64  # rocprofv3 nests 6 deep
MAX_RECORD_BYTES = 16 << 20  # no record (nor string) is longer: past it the file is damaged


def sniff(folder: Path) -> bool:
    return any(_is_rocprof(p) for p in _files(folder))


def _files(folder: Path) -> list[Path]:
    return sorted(p for pattern in ("*_results.json", "*_results.json.gz") for p in folder.glob(pattern))


def _is_rocprof(path: Path) -> bool:
    head = first_bytes(path, 4096).lstrip()
    return head.startswith(b"{") and f'"{_TOOL}"'.encode() in head


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank a file, numbered in the order of the files' names: the file names no rank."""
    return [_rank_info(path, rank) for rank, path in enumerate(p for p in _files(folder) if _is_rocprof(p))]


def lone_file(path: Path, diag: Diagnostics | None) -> RankInfo | None:
    return _rank_info(path, 0) if path.is_file() and _is_rocprof(path) else None


_META = {key: re.compile(rb'"' + key.encode() + rb'"\s*:\s*("(?:[^"\\]|\\.)*"|\d+)')
         for key in ("hostname", "init_time", "pid")}


def _rank_info(path: Path, rank: int) -> RankInfo:
    """The rank of one file, from its ``metadata`` (which rocprofv3 writes first)."""
    head = first_bytes(path, _HEAD)
    meta = {key: _value(found[1]) for key, pattern in _META.items() if (found := pattern.search(head))}
    start, host = meta.get("init_time"), meta.get("hostname")
    return RankInfo(rank=rank, format=NAME, path=path, host=host if isinstance(host, str) and host else None,
                    start_ns=start if type(start) is int else None, clock=CLOCK, source_paths=(path,),
                    wall_clock=False)


def _value(text: bytes) -> Any:
    """A metadata value as written; None where it is no JSON (a name with a broken escape)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True,
         step_marker: str | None = None) -> Iterator[StepRecords]:
    """The rank's steps in time order: the ranges of ``step_marker`` (rocTX), else the whole
    capture as one step. Host ranges in detail only."""
    marker = markers.checked(step_marker)
    path = rank.source_paths[0]
    with StepSpill() as spill:
        held = ByTime(spill, rank.rank, WINDOW_NS if marker else PART_WINDOW_NS)  # no marker: no steps
        file = _File(rank, path, diag, detail, marker)
        for records in file.records():
            held.add(records)
        steps = _steps(file.marked, marker, path, diag)
        pairs = _by_step(rank.rank, held, steps, file.rccl.typed)
        yield from flows.linked(pairs, diag, events=False) if detail else (records for records, _ in pairs)


def _steps(marked: list[tuple[int, int]], marker: str | None, path: Path, diag: Diagnostics) -> list[Step]:
    if marker is not None and not marked:
        diag.warn(markers.UNMATCHED, f"{path}: no rocTX range named {marker!r}; the whole capture is "
                  "one step")
    return [Step(None, n, start, start + dur) for n, (start, dur) in enumerate(markers.numbered(marked), 1)]


def _by_step(rank: int, held: ByTime, steps: list[Step], typed: Callable[[Slice], Slice] = lambda s: s
             ) -> Iterator[tuple[StepRecords, list[FlowEnd]]]:
    """The records held, under the step that holds their start (none: outside every step); each
    RCCL kernel ``typed`` by the call that launched it."""
    def made(step: Step | None, end: int | None) -> tuple[StepRecords, list[FlowEnd]]:
        found = StepRecords(rank, None, None if step is None else step.step, step, [])
        ends: list[FlowEnd] = []
        for batch in held.take_before(end):
            for r in batch:
                if type(r) is FlowEnd:
                    ends.append(r)
                else:
                    found.slices.append(typed(r) if r.layer is Layer.COMM_OP else r)
        return found, ends

    if not steps:  # the whole capture, a part at a time
        yield from in_parts(Parts(rank), held.take_before(None), typed)
        return
    for step in steps:
        before = made(None, step.start_ns)
        if before[0].slices:
            yield before
        yield made(step, step.end_ns)
    after = made(None, None)
    if after[0].slices:
        yield after


class _File:
    """One file's records as they stream by, with what is counted of them for the warnings."""

    def __init__(self, rank: RankInfo, path: Path, diag: Diagnostics, detail: bool,
                 marker: str | None) -> None:
        self._rank, self._path, self._diag, self._detail, self._marker = rank, path, diag, detail, marker
        self._gpus: dict[int, int] = {}  # agent handle -> gpu index
        self._symbols: dict[int, str] = {}
        self._kinds: list[list[str]] = []  # a kind's operation names by number
        self._messages: dict[int, str] = {}  # rocTX messages by correlation id
        self.marked: list[tuple[int, int]] = []  # the step marker's ranges
        self._bad: dict[str, int] = {}  # records left out, by why
        self._unnamed: dict[int, int] = {}  # dispatches of kernel ids kernel_symbols lacks
        self._unread: dict[str, int] = {}  # records of arrays this reader does not read
        self.rccl = RcclCalls()

    def records(self) -> Iterator[list[Slice | FlowEnd]]:
        for name, items in _sections(self._path, self._diag):
            if name is None:
                continue
            if name.startswith("other:"):
                self._unread[name[6:]] = self._unread.get(name[6:], 0) + len(items)
                continue
            made = getattr(self, f"_on_{name}")(items)
            if made:
                yield made
        self._warn()

    def _on_agents(self, items: list[Any]) -> None:
        for a in items:
            if isinstance(a, dict) and a.get("type") == _GPU:
                index = a.get("gpu_index", a.get("logical_node_type_id"))
                try:
                    self._gpus[_handle(a.get("id"))] = index if type(index) is int else len(self._gpus)
                except ValueError:  # its records are then on no GPU of the list: counted there
                    self._left_out("GPU agents without an id")

    def _on_symbols(self, items: list[Any]) -> None:
        for k in items:
            if isinstance(k, dict) and type(k.get("kernel_id")) is int:
                name = (k.get("formatted_kernel_name") or k.get("demangled_kernel_name")
                        or k.get("kernel_name"))
                if isinstance(name, str) and name:
                    self._symbols[k["kernel_id"]] = name

    def _on_kinds(self, items: list[Any]) -> None:
        self._kinds.extend(k.get("operations", []) if isinstance(k, dict) else [] for k in items)

    def _on_messages(self, items: list[Any]) -> None:
        for m in items:
            if isinstance(m, dict) and type(m.get("key")) is int and isinstance(m.get("value"), str):
                self._messages[m["key"]] = m["value"]

    def _on_kernel_dispatch(self, items: list[Any]) -> list[Slice | FlowEnd]:
        out: list[Slice | FlowEnd] = []
        for r in items:
            try:
                info = r["dispatch_info"]
                kernel, queue = _handle(info["kernel_id"]), _handle(info["queue_id"])
                start, end = _span(r)
                gpu = self._gpu(_handle(info["agent_id"]))
            except (KeyError, TypeError, ValueError):
                self._left_out("kernel_dispatch records without a time, kernel or queue")
                continue
            name = self._symbols.get(kernel)
            if name is None:
                self._unnamed[kernel] = self._unnamed.get(kernel, 0) + 1
                name = f"kernel {kernel}"
            args = as_json({"kernel_id": kernel, "queue": queue, "correlation_id": _correlation(r),
                         "grid": _dims(info.get("grid_size")),
                         "workgroup": _dims(info.get("workgroup_size"))})
            kind = collectives.nccl(name)
            if kind == COLLECTIVE:  # RCCL's generic kernel: its launching call may say which
                self.rccl.untyped(_correlation(r))
            if kind is not None:
                made = Slice(self._rank.rank, Layer.COMM_OP, f"RCCL (GPU {gpu})", name, start, end - start,
                             args, comm_type(kind))
            else:
                made = Slice(self._rank.rank, Layer.STREAM, f"GPU {gpu} Queue {queue}", name, start,
                             end - start, args, GPU_KERNEL)
            out.append(made)
            self._arrow_end(out, made, r)
        return out

    def _on_memory_copy(self, items: list[Any]) -> list[Slice | FlowEnd]:
        out: list[Slice | FlowEnd] = []
        for r in items:
            try:
                start, end = _span(r)
                dst, src = _handle(r.get("dst_agent_id")), _handle(r.get("src_agent_id"))
                gpu = self._gpu(dst if dst in self._gpus else src)
            except (KeyError, TypeError, ValueError):
                self._left_out("memory_copy records without a time or a GPU")
                continue
            size = r.get("bytes")
            args = as_json({"bytes": size if type(size) is int else None, "correlation_id": _correlation(r)})
            made = Slice(self._rank.rank, Layer.STREAM, f"GPU {gpu} Copies", self._operation(r), start,
                         end - start, args, "MEMCPY")
            out.append(made)
            self._arrow_end(out, made, r)
        return out

    def _host_api(self, items: list[Any], api: str) -> list[Slice | FlowEnd]:
        out: list[Slice | FlowEnd] = []
        for r in items:
            try:
                start, end = _span(r)
                thread = checked_id(r["thread_id"])
            except (KeyError, TypeError, ValueError):
                self._left_out(f"{api} records without a time or thread")
                continue
            name = self._operation(r)
            if api == "hip_api":
                self.rccl.launch(_correlation(r), thread, start)
            elif api == "rccl_api":
                self.rccl.call(_correlation(r), thread, start, end, name)
            elif api == "marker_api":
                name = self._messages.get(_correlation(r), name)
                if self._marker is not None and _marks(self._marker, name):
                    self.marked.append((start, end - start))
            if not self._detail:
                continue
            made = Slice(self._rank.rank, Layer.HOST, f"Thread {thread}", name, start, end - start,
                         as_json({"correlation_id": _correlation(r)}))
            out.append(made)
            if api != "marker_api":
                out.append(FlowEnd(self._rank.rank, Layer.HOST, made.lane, start, _key(r), True))
        return out

    def _on_hip_api(self, items: list[Any]) -> list[Slice | FlowEnd]:
        return self._host_api(items, "hip_api")

    def _on_hsa_api(self, items: list[Any]) -> list[Slice | FlowEnd]:
        return self._host_api(items, "hsa_api")

    def _on_rccl_api(self, items: list[Any]) -> list[Slice | FlowEnd]:
        return self._host_api(items, "rccl_api")

    def _on_marker_api(self, items: list[Any]) -> list[Slice | FlowEnd]:
        return self._host_api(items, "marker_api")

    def _arrow_end(self, out: list[Slice | FlowEnd], made: Slice, record: dict) -> None:
        if self._detail:
            out.append(FlowEnd(made.rank, made.layer, made.lane, made.start_ns, _key(record), False))

    def _gpu(self, agent: int) -> int:
        gpu = self._gpus.get(agent)
        if gpu is None:
            raise ValueError(f"agent {agent} is no GPU of the file's agents")
        return gpu

    def _operation(self, r: dict) -> str:
        kind, op = r.get("kind"), r.get("operation")
        try:
            name = self._kinds[kind][op]
        except (IndexError, TypeError, KeyError):
            name = None
        return name if isinstance(name, str) and name else f"kind {kind} operation {op}"

    def _left_out(self, why: str) -> None:
        self._bad[why] = self._bad.get(why, 0) + 1

    def _warn(self) -> None:
        path, diag = self._path, self._diag
        if self._unnamed:
            ids = ", ".join(str(k) for k in sorted(self._unnamed)[:10])
            ids += " ..." if len(self._unnamed) > 10 else ""
            diag.warn("missing_kernel_symbol", f"{path}: kernel_symbols has no entry for kernel ids {ids} "
                      f"({sum(self._unnamed.values())} dispatches); drawn as 'kernel <id>'")
        for why, n in self._bad.items():
            diag.warn("bad_record", f"{path}: {n} {why}; left out")
        unread = {k: n for k, n in self._unread.items() if n}
        if unread:
            diag.warn("unread_records", f"{path}: records this reader does not draw, left out: "
                      + ", ".join(f"{n} {k}" for k, n in sorted(unread.items())))


class RcclCalls:
    """Which collective each RCCL generic kernel (``ncclDevKernel_Generic``) ran, from the RCCL call
    that launched it (``rccl_api``: ``ncclAllReduce``, ...), as Kineto's ``record_param_comms`` says
    it (docs/formats.md §12). rocprofv3 gives a dispatch the correlation id innermost on its
    thread when it was enqueued: the RCCL call's own where HIP is not traced; else the HIP launch's
    (``hip_api``), which runs inside the RCCL call on the same thread. A kernel launched by
    ``ncclGroupEnd`` ran the calls of its group (since the ``ncclGroupStart`` on that thread): one
    kind, that kind; sends and receives, ``SENDRECV``; else ``COLLECTIVE``. Held: the generic
    kernels' correlation ids, their HIP launches, and the RCCL calls (a few per collective)."""

    def __init__(self) -> None:
        self._kernels: set[int] = set()
        self._launches: dict[int, tuple[int, int]] = {}  # a kernel's HIP launch: thread, start
        self._calls: dict[int, list[tuple[int, int, str]]] = {}  # per thread: start, end, name
        self._own: dict[int, tuple[int, int]] = {}  # a call's correlation id -> thread, start
        self._sorted = False

    def untyped(self, correlation: int | None) -> None:
        if correlation is not None:
            self._kernels.add(correlation)

    def launch(self, correlation: int | None, thread: int, start: int) -> None:
        if correlation in self._kernels:
            self._launches[correlation] = (thread, start)

    def call(self, correlation: int | None, thread: int, start: int, end: int, name: str) -> None:
        self._calls.setdefault(thread, []).append((start, end, name))
        if correlation is not None:
            self._own[correlation] = (thread, start)
        self._sorted = False

    def typed(self, op: Slice) -> Slice:
        """The RCCL kernel with the kind and name of the call that launched it, where the file holds it."""
        if op.task_type != COLLECTIVE or not self._calls:
            return op
        args = orjson.loads(op.args) if isinstance(op.args, bytes) else {}
        found = self._launcher(args.get("correlation_id"))
        if found is None:
            return op
        kind, name = found
        return op._replace(task_type=comm_type(kind), args=as_json({**args, "rccl call": name}))

    def _launcher(self, correlation: Any) -> tuple[str, str] | None:
        if not self._sorted:
            for calls in self._calls.values():
                calls.sort()
            self._sorted = True
        at = self._own.get(correlation) or self._launches.get(correlation)
        if at is None:
            return None
        thread, start = at
        calls = self._calls.get(thread, [])
        index = bisect_right(calls, (start, _LAST, "")) - 1  # the latest call begun by then
        while index >= 0 and calls[index][1] < start:  # ended before: not the launching one
            index -= 1
        if index < 0:
            return None
        name = calls[index][2]
        if name != "ncclGroupEnd":
            kind = _rccl_kind(name)
            return None if kind is None else (kind, name)
        return _group_kind(calls, index)


_LAST = 1 << 64  # after any end: bisect finds every call begun by a time


def _rccl_kind(name: str) -> str | None:
    """What an RCCL call does (``ncclAllReduce``: allreduce); None for one that runs no collective
    (``ncclCommInitRank``, ``ncclGroupStart``)."""
    return collectives.of_word(name.removeprefix("nccl")) if name.startswith("nccl") else None


def _group_kind(calls: list[tuple[int, int, str]], end: int) -> tuple[str, str] | None:
    """The kind of the calls of the group ``ncclGroupEnd`` (at ``end``) closes, back to its
    ``ncclGroupStart`` (groups nest)."""
    depth, kinds, names = 0, set(), set()
    for index in range(end, -1, -1):
        name = calls[index][2]
        depth += (name == "ncclGroupEnd") - (name == "ncclGroupStart")
        if depth == 0:
            break
        if (kind := _rccl_kind(name)) is not None:
            kinds.add(kind)
            names.add(name)
    if not kinds:
        return None
    kind = kinds.pop() if len(kinds) == 1 else SENDRECV if kinds == {SEND, RECV} else COLLECTIVE
    return kind, "ncclGroupEnd: " + "+".join(sorted(names))


def _marks(marker: str, name: str) -> bool:
    return name.startswith(marker[:-1]) if marker.endswith("*") else name == marker


def _handle(value: Any) -> int:
    handle = value.get("handle") if isinstance(value, dict) else value
    if type(handle) is not int:
        raise ValueError(f"expected a handle, got {handle!r:.40}")
    return handle


def _correlation(r: dict) -> int | None:
    found = r.get("correlation_id")
    found = found.get("internal") if isinstance(found, dict) else found
    return found if type(found) is int else None


def _key(r: dict) -> str:
    return f"correlation:{_correlation(r)}"


def _span(r: dict) -> tuple[int, int]:
    start, end = r["start_timestamp"], r["end_timestamp"]
    if type(start) is not int or type(end) is not int or end < start:
        raise ValueError("no span")
    return checked_ns(start), checked_ns(end)


def _dims(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    get = value.get  # one str for each of the file's dispatches: no generator, no join
    return f"{get('x')}x{get('y')}x{get('z')}"


# -- streaming the file's arrays ------------------------------------------------------------------

# A string (a key where a ":" follows; cut off at the end of the buffer where no closing quote comes),
# or a bracket. What lies between them (numbers, literals, commas) is no structure.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*(?:"(?:\s*:)?)?|[{}\[\]]', re.DOTALL)
_OPEN, _CLOSE = frozenset(b"{["), frozenset(b"}]")


def _sections(path: Path, diag: Diagnostics, chunk: int = 1 << 20) -> Iterator[tuple[str | None, list[Any]]]:
    """The elements of the arrays this reader reads (``_ARRAYS``), a batch at a time with their
    short name; arrays of ``buffer_records`` it does not read come as ``other:<key>``, their
    elements counted, not decoded. Memory holds a chunk and one batch. A file cut off yields what
    came before the cut, with a warning. The tokenizer walks the structure; the objects of a named
    array it leaves to ``_Runs`` (a run of them decoded at once, 10x faster), where that can take them.

    Raises:
        InputError: the file cannot be read.
    """
    frames: list[tuple[bool, tuple[str, ...], str | None]] = []  # (an array?, its keys' path, its name)
    key: str | None = None
    batch: list[Any] = []  # an element's text, or (taken in a run) the element decoded
    size, start, pos, base, whole = 0, -1, 0, 0, 0
    runs = _Runs()
    try:
        f = open_bytes(path, diag)
    except OSError as e:
        raise InputError(path, "", f"cannot read: {e.strerror or e}") from e
    with f:
        buf = b""
        while True:
            try:
                more = f.read(chunk)
            except OSError as e:
                raise InputError(path, "", f"cannot read: {e.strerror or e}") from e
            buf += more
            runs.refill(base)
            while (m := _TOKEN.search(buf, pos)) is not None:
                byte, last = buf[m.start()], buf[m.end() - 1]
                if more and (m.end() == len(buf) or (byte == 0x22 and last not in b'":')):
                    pos = m.start()  # cut by the chunk: read again with the next
                    break
                pos = m.end()
                if byte == 0x22:
                    if last == 0x3A:
                        key = _key_text(m.group())
                    continue
                in_array = bool(frames) and frames[-1][0] and frames[-1][2] is not None
                room = _MAX_DEPTH - len(frames)
                if in_array and byte == 0x7B and (run := runs.take(buf, m.start(), room, frames[-1])):
                    items, sizes, pos = run  # whole objects, as the tokenizer would have found them
                    named, key = frames[-1][2], None
                    whole += len(items)
                    if named.startswith("other:"):
                        continue
                    for item, n in zip(items, sizes, strict=True):
                        batch.append(item)
                        size += n
                        if size >= _BATCH_BYTES:
                            yield named, _decoded(batch, path, diag)
                            batch, size = [], 0
                    continue
                if byte in _OPEN:
                    parent = frames[-1] if frames else (True, (), None)  # the top level: no key
                    keys = parent[1] if parent[0] else (*parent[1], key or "")
                    frames.append((byte == 0x5B, keys, _name(keys) if byte == 0x5B else None))
                    if len(frames) > _MAX_DEPTH:
                        raise InputError(path, f"byte {base + m.start()}", f"nested deeper than "
                                         f"{_MAX_DEPTH}, which rocprofv3 never writes (damaged?)")
                    if in_array and byte == 0x7B:  # an element of a named array begins
                        start = m.start()
                    key = None
                    continue
                if not frames or frames[-1][0] != (byte == 0x5D):
                    raise InputError(path, f"byte {base + m.start()}", f"not valid JSON (a {chr(byte)!r} "
                                     "that closes nothing opened)")
                closed = frames.pop()
                named = frames[-1][2] if frames and frames[-1][0] else None
                if named is not None and byte == 0x7D and start >= 0:  # an element ends
                    whole += 1
                    if not named.startswith("other:"):
                        batch.append(buf[start:m.end()])
                        size += m.end() - start
                    start = -1
                    if size >= _BATCH_BYTES:
                        yield named, _decoded(batch, path, diag)
                        batch, size = [], 0
                elif closed[0] and closed[2] is not None:  # a named array ends
                    name = closed[2]
                    yield name, _batch(name, batch, whole, path, diag)
                    batch, size, whole = [], 0, 0
            else:
                pos = len(buf)
            if not more:
                break
            keep = min(pos, start) if start >= 0 else pos
            buf, base, pos = buf[keep:], base + keep, pos - keep
            start = start - keep if start >= 0 else -1
            if len(buf) > MAX_RECORD_BYTES:  # a record or string that never ends: memory and time bounded
                raise InputError(path, f"byte {base}", f"a record or string of more than "
                                 f"{MAX_RECORD_BYTES >> 20} MiB, which rocprofv3 never writes (damaged: a "
                                 "quote or bracket lost?)")
    if frames:
        open_name = next((fr[2] for fr in reversed(frames) if fr[2] is not None), None)
        diag.warn("truncated_file", f"{path}: cut off at byte {base + len(buf)}"
                  + (f" in {open_name}; read the records before the cut" if open_name else ""))
        if open_name is not None:
            yield open_name, _batch(open_name, batch, whole, path, diag)


# Where one object of an array may end and the next begin: a candidate, as a string may hold it too
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_RUN_BYTES = 1 << 18  # a run's most: what a failed try costs (copied, decoded) is bounded
_MIN_RUN = 1 << 12
_Taken = tuple[list[Any], list[int], int]  # objects, their sizes in bytes, the byte after the last


class _Runs:
    """Runs of a named array's objects, each decoded in one call (``orjson``) instead of tokenized:
    from an object's ``{`` to the last candidate boundary (``_BOUNDARY``) within a window (at most
    ``_RUN_BYTES``), taken where it decodes as one object per candidate: then every candidate is a
    boundary (the real ones are among them), so the objects, their bytes (the batches' sizes) and
    the run's end are what the tokenizer would have found. Where it fails at a byte (the array's
    end), tried once more up to the last candidate before it; then the one object alone (``_one``:
    an agent, whose caches' boundaries are candidates too). Where all fail (a candidate inside a
    string, a damaged record, nesting too deep), the tokenizer reads on to where the try got: it
    meets every error as before, and what a try costs is what the tokenizer reads after it."""

    def __init__(self) -> None:
        self._base = 0  # where the buffer starts in the file
        self._exact = 0  # the file's bytes before it are the tokenizer's
        self._from = -1  # where the candidates were searched from in this buffer; -1: not yet
        self._ends: list[int] = []  # each candidate's "}" (in the buffer)
        self._starts: list[int] = []  # each candidate's next "{"
        self._window = _RUN_BYTES  # a run's most: halved where one fails, so failing stays cheap
        self._array: object = None  # the array the window is of

    def refill(self, base: int) -> None:
        self._base, self._from = base, -1

    def take(self, buf: bytes, at: int, room: int, array: object) -> _Taken | None:
        """The objects of the run from the ``{`` at ``at``, their sizes, and the byte after the run;
        None: none taken here. ``room``: how many levels an object may nest (the tokenizer's limit);
        ``array``: the array's frame (each array's runs begin at the longest)."""
        if self._base + at < self._exact:
            return None
        if array is not self._array:
            self._array, self._window = array, _RUN_BYTES
        if self._from < 0 or at < self._from:
            found = list(_BOUNDARY.finditer(buf, at))
            self._from = at
            self._ends, self._starts = [m.start() for m in found], [m.end() - 1 for m in found]
        lo = bisect_right(self._ends, at)
        hi = bisect_right(self._ends, at + self._window, lo)
        if hi == lo == len(self._ends):  # the buffer holds no boundary past this object
            self._exact = self._base + len(buf)
            return None
        run, failed = None, at + 1  # failed: where the tokenizer takes over if nothing is taken
        if hi > lo and self._window > _MIN_RUN:  # (runs failing at the least: objects one by one)
            try:
                run, failed = self._run(buf, at, lo, hi, room), self._ends[hi - 1] + 1
            except orjson.JSONDecodeError as e:  # the array ends before, or a record is damaged
                failed = at + _bytes(buf, at, e.pos - 1)  # the byte it failed at
                before = min(bisect_right(self._ends, failed - 1, lo, hi), hi - 1)  # the candidates before
                run = self._before(buf, at, lo, before, room)
        if run is not None:
            self._window = min(2 * self._window, _RUN_BYTES)
            return run
        self._window = max(self._window // 2, _MIN_RUN)
        run = self._one(buf, at, lo, room)
        if run is None:
            self._exact = self._base + max(failed, at + 1)
        return run

    def _before(self, buf: bytes, at: int, lo: int, hi: int, room: int) -> _Taken | None:
        """The run to the candidates before where a longer one failed (the array's end), if it holds."""
        try:
            return self._run(buf, at, lo, hi, room) if hi > lo else None
        except orjson.JSONDecodeError:
            return None

    def _one(self, buf: bytes, at: int, lo: int, room: int) -> _Taken | None:
        """The object at ``at`` alone, where a candidate ends it: one whose own arrays hold objects
        (an agent's caches), their boundaries candidates too, or longer than a run. orjson says
        where the object ends (the content after it: it reads no further), the object decoded alone
        confirms it. orjson checks all it is given first: longer texts only while the object goes on."""
        for size in (1 << 10, 1 << 13, 1 << 16, _RUN_BYTES):
            text = memoryview(buf)[at:at + size]
            try:
                orjson.loads(text)
                end = at + len(text)
            except orjson.JSONDecodeError as e:
                end = at + _bytes(buf, at, e.pos)  # the first byte after the object
                if end - at >= len(text) == size:  # the object goes on past the text
                    continue
            break
        else:
            return None
        last = bisect_right(self._ends, end - 1, lo) - 1  # the candidate there: the object's "}"?
        if last < lo:
            return None
        end = self._ends[last] + 1
        try:
            item = orjson.loads(memoryview(buf)[at:end])
        except orjson.JSONDecodeError:
            return None
        if type(item) is not dict or (buf.count(b"{", at, end) + buf.count(b"[", at, end) > room
                                      and _deeper(item, room)):
            return None
        return [item], [end - at], end

    def _run(self, buf: bytes, at: int, lo: int, hi: int, room: int) -> _Taken | None:
        """The run from ``at`` to the candidate ``hi - 1``, if it holds one object per candidate."""
        end = self._ends[hi - 1] + 1
        items = orjson.loads(b"".join((b"[", memoryview(buf)[at:end], b"]")))
        starts = [at, *self._starts[lo:hi - 1]]
        if len(items) != hi - lo or any(  # a candidate in a string; an object nested too deep
                buf.count(b"{", s, e) + buf.count(b"[", s, e) > room and _deeper(item, room)
                for item, s, e in zip(items, starts, self._ends[lo:hi], strict=True)):
            return None
        return items, [e + 1 - s for s, e in zip(starts, self._ends[lo:hi], strict=True)], end


def _bytes(buf: bytes, at: int, chars: int) -> int:
    """How many bytes the ``chars`` characters from ``at`` take, as orjson counts in characters (the
    text it got past is valid UTF-8)."""
    head = bytes(memoryview(buf)[at:at + max(chars, 0) * 4])
    return chars if head[:chars].isascii() else len(head.decode("utf-8", "ignore")[:chars].encode())


def _deeper(item: Any, room: int) -> bool:
    """Whether ``item`` nests more than ``room`` levels (itself the first); asked only of an object
    whose text opens more than ``room`` brackets, as no other can."""
    level, depth = [item], 1
    while level:
        if depth > room:
            return True
        level = [v for c in level for v in (c.values() if type(c) is dict else c)
                 if type(v) is dict or type(v) is list]
        depth += 1
    return False


def _batch(name: str, batch: list[Any], whole: int, path: Path, diag: Diagnostics) -> list[Any]:
    """An array's last batch: its elements decoded, or (an array not read) as many Nones."""
    return [None] * whole if name.startswith("other:") else _decoded(batch, path, diag)


def _name(keys: tuple[str, ...]) -> str | None:
    """The short name of an array read at that path under the tool's object; None: not read."""
    if len(keys) < 2 or keys[0] != _TOOL:
        return None
    inner = keys[1:]
    if inner in _ARRAYS:
        return _ARRAYS[inner]
    return f"other:{inner[1]}" if len(inner) == 2 and inner[0] == "buffer_records" else None


def _key_text(token: bytes) -> str:
    text = token[:-1].rstrip()
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return ""
    return value if isinstance(value, str) else ""


def _decoded(batch: list[Any], path: Path, diag: Diagnostics) -> list[Any]:
    """A batch's elements: the texts the tokenizer cut decoded (the damaged ones left out, counted),
    the ones a run decoded as they are."""
    texts = [item for item in batch if type(item) is bytes]
    if not texts:
        return batch
    try:
        found = iter(orjson.loads(b"[" + b",".join(texts) + b"]"))
        return [next(found) if type(item) is bytes else item for item in batch]
    except orjson.JSONDecodeError:
        pass
    good = []
    for item in batch:
        try:
            good.append(orjson.loads(item) if type(item) is bytes else item)
        except orjson.JSONDecodeError:
            pass
    diag.warn("bad_record", f"{path}: {len(batch) - len(good)} records that are not valid JSON; left out")
    return good


READER = Reader(
    name=NAME, folder="rocprofv3 JSON results (*_results.json)",
    sniff=sniff, rank_infos=rank_infos, read=read,
    lone_files=("a rocprofv3 *_results.json",), lone_file=lone_file,
    files=True, step_marker=True,
)
