"""Chrome-trace profiles at a real job's shape: a real sample's events repeated until the file is
N bytes, for ``make bench`` beside the generated ones (``bench/real_db.py`` does this for the
database form).

The generators (``fixtures/``) write each format's quirks, but not a real run's event mix: a real
Kineto trace is mostly CPU ops with long ``Input Dims``/``Call stack`` args and memory instants, a
real torch_npu ``trace_view.json`` is half counters (``C``) and Python functions, a real Paddle
export nests five layers of host events with their durations in the names. Tiling keeps every
event's kind, args and name as the profiler wrote them; copy k of the sample's events is moved
past copy k-1:

- its times by k spans of the sample (``ts``; Paddle's ``start_time``/``end_time`` args, Kineto
  1.8's ``external ts``), text kept as text (torch_npu's ``ts`` strings keep their 3 decimals);
- its ids by k * a stride above any id of the sample: flow ids (``id`` of ``s``/``t``/``f``,
  digit strings kept strings), the args that join events (``ID_ARGS``), and ids that are a
  device task's start in ns (torch_npu's ``torch_to_npu`` arrows: >= 1e15) by k spans in ns, so
  they stay that task's start; negative ids and ``NONE_ID`` ("no id") as they are;
- its step numbers (``ProfilerStep#N``, Paddle's ``ProfileStep#N[...]``) by k * the sample's steps.

What the file says once is written once: the header's keys (``distributedInfo``,
``baseTimeNanoseconds``, ``deviceProperties``, ``traceName``, ...), the metadata events (``M``:
process and thread names) and Paddle's closing ``{}``, where the sample has them (before its
first repeated event, among copy 0's, or after the last copy). The sample's text is kept: each
event as the profiler laid it out (Kineto's and Paddle's indented lines, torch_npu's one line),
only the values a copy moves rewritten, so the file has the profiler's bytes per event. The file
is written as it goes (an event at a time), never held whole. Output under build/bench only: the
events are the real files', which stay out of the repository.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# args that number events for joining them: each copy's moved past the previous copy's
ID_ARGS = ("correlation", "External id", "external id", "Python id", "Python parent id", "Record function id",
           "Sequence number", "Ev Idx", "connection_id", "correlation_id")
TIME_ARGS = ("external ts",)  # µs, as ``ts``
TEXT_TIME_ARGS = ("start_time", "end_time")  # Paddle's "933.616 us"
NONE_ID = 4294967295
TIME_ID = 10**15  # an id this large is a time in ns (torch_npu's torch_to_npu arrows)
_STEP = re.compile(r"^(Profiler?Step#)(\d+)")
_GAP_US = 1000  # between one copy's last event and the next copy's first

# the samples under TRACE2PERFETTO_REALDATA each format's case tiles
KINETO = "kineto-1.8-resnet50"
KINETO_SERVING = "kineto-b200-vllm"  # no ProfilerStep, no metadata: the capture in parts, streams unnamed
TORCH_NPU = "ascend-pt-2rank"
PADDLE = "paddle-cpu-chrome"


def load_sample(path: Path) -> tuple[dict[str, Any], list[dict]]:
    """(the header's keys in their order, ``traceEvents`` left out; the events) of a Chrome trace,
    an array (torch_npu) or an object, gzip or not."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    data = json.loads(raw)
    if isinstance(data, list):
        return {}, data
    return {key: value for key, value in data.items() if key != "traceEvents"}, data["traceEvents"]


class Tiling:
    """How copy k of a sample's events differs from copy 0: its span, id stride and steps."""

    def __init__(self, events: list[dict]) -> None:
        starts = [_us(e["ts"]) for e in events if "ts" in e and e.get("ph") != "M"]
        ends = [_us(e["ts"]) + float(e.get("dur") or 0) for e in events if "ts" in e and e.get("ph") != "M"]
        self.span_us = int(max(ends) - min(starts)) // 1000 * 1000 + 1000 + _GAP_US  # whole ms
        ids = [i for e in events for i in _ids(e) if 0 <= i < TIME_ID and i != NONE_ID]
        self.id_stride = 10 ** len(str(max(ids, default=0)))
        numbers = [int(m[2]) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
        self.steps = max(numbers) - min(numbers) + 1 if numbers else 0

    def copy(self, event: dict, k: int) -> dict:
        """Copy k of ``event`` (k=0: the event itself)."""
        if k == 0:
            return event
        event = dict(event)
        shift = k * self.span_us
        if "ts" in event:
            event["ts"] = _shifted(event["ts"], shift)
        if "id" in event and event.get("ph") in ("s", "t", "f"):
            old, event["id"] = event["id"], self._id(event["id"], k)
            if isinstance(name := event.get("name"), str) and name.endswith(str(old)):  # "HostToDevice936"
                event["name"] = name[:-len(str(old))] + str(event["id"])
        if self.steps and isinstance(name := event.get("name"), str) and (m := _STEP.match(name)):
            event["name"] = f"{m[1]}{int(m[2]) + k * self.steps}{name[m.end():]}"
        args = event.get("args")
        if isinstance(args, dict) and args:
            args = dict(args)
            for key in ID_ARGS:
                if key in args:
                    args[key] = self._id(args[key], k)
            for key in TIME_ARGS:
                if key in args:
                    args[key] = _shifted(args[key], shift)
            for key in TEXT_TIME_ARGS:
                if isinstance(value := args.get(key), str) and value.endswith(" us"):
                    args[key] = _shifted(value[:-3], shift) + " us"
            event["args"] = args
        return event

    def _id(self, value: Any, k: int) -> Any:
        if isinstance(value, str):
            return str(self._id(int(value), k)) if value.isdigit() else value
        if type(value) is not int or value < 0 or value == NONE_ID:
            return value
        return value + (k * self.span_us * 1000 if value >= TIME_ID else k * self.id_stride)


def _ids(event: dict) -> Iterator[int]:
    """The event's ids as ints (those moved from copy to copy)."""
    values = [event.get("id")] if event.get("ph") in ("s", "t", "f") else []
    if isinstance(args := event.get("args"), dict):
        values += [args.get(key) for key in ID_ARGS]
    for value in values:
        if type(value) is int:
            yield value
        elif isinstance(value, str) and value.isdigit():
            yield int(value)


def _us(ts: Any) -> float:
    return float(ts)


def _shifted(ts: Any, shift: int) -> Any:
    """``ts`` moved by ``shift`` whole µs, in its own form: an int, a float (3 decimals, as
    Kineto's), or text (torch_npu's "1736408883688177.930", its decimals as they were)."""
    if type(ts) is int:
        return ts + shift
    if type(ts) is float:
        return round(ts + shift, 3)
    if isinstance(ts, str):
        whole, dot, decimals = ts.partition(".")
        return f"{int(whole) + shift}{dot}{decimals}" if whole.lstrip("-").isdigit() else ts
    return ts


def write_tiled(sample: Path, target: Path, size: int) -> int:
    """``target``: the Chrome trace ``sample`` with its events repeated (``Tiling``) until the file
    holds at least ``size`` bytes (at least one copy); returns the copies written. The sample's
    own text is kept: its header and trailer as they are, each event as the profiler laid it out
    (Kineto's and Paddle's indentation, torch_npu's one line), only the values a copy moves
    rewritten, so a copy has the bytes per event the profiler writes."""
    text, events, start, end = _parsed(sample)
    tiling = Tiling([event for event, _, _ in events])
    once = [event.get("ph") == "M" or event == {} for event, _, _ in events]  # metadata, Paddle's closing {}
    repeated = [i for i, o in enumerate(once) if not o]
    head, tail = range(repeated[0]), range(repeated[-1] + 1, len(events))
    separator = next((lead for _, lead, _ in events if "," in lead), ",\n")
    templates = [_template(body, event) for event, _, body in events]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    copies = 0
    with open(partial, "wb") as out:
        out.write(text[:start].encode())
        written = False

        def write(i: int, k: int) -> None:
            nonlocal written
            lead = events[i][1]
            body = templates[i].text(events[i][0], tiling.copy(events[i][0], k)) if k else events[i][2]
            out.write(((lead if "," in lead or not written else separator) + body).encode())
            written = True

        for i in head:
            write(i, 0)
        for k in _copies(out, size):
            for i in range(repeated[0], repeated[-1] + 1) if k == 0 else repeated:
                write(i, k)
            copies += 1
        for i in tail:
            write(i, 0)
        out.write(text[end:].encode())
    partial.replace(target)
    return copies


def _copies(out, size: int) -> Iterator[int]:
    """0, 1, ... while the file holds less than ``size`` bytes (0 always)."""
    k = 0
    while k == 0 or out.tell() < size:
        yield k
        k += 1


def _parsed(sample: Path) -> tuple[str, list[tuple[dict, str, str]], int, int]:
    """(the file's text, its events each with the text before it (commas, whitespace) and its own
    text, where the events begin and where they end)."""
    raw = gzip.decompress(sample.read_bytes()) if sample.suffix == ".gz" else sample.read_bytes()
    text = raw.decode()
    found = re.search(r'"traceEvents"\s*:\s*\[', text) or re.match(r"\s*\[", text)
    decoder, pos, events = json.JSONDecoder(), found.end(), []
    while True:
        lead = _LEAD.match(text, pos).end()
        if text[lead] == "]":
            return text, events, found.end(), lead
        event, after = decoder.raw_decode(text, lead)
        events.append((event, text[pos:lead], text[lead:after]))
        pos = after


_LEAD = re.compile(r"[\s,]*")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+')
_OWN_SLOTS = ("ts", "id", "name")
_ARG_SLOTS = (*ID_ARGS, *TIME_ARGS, *TEXT_TIME_ARGS)


class _Template:
    """An event's text cut where the values a copy may change lie: its ``ts``, ``id`` and
    ``name``, and those of its args in ``_ARG_SLOTS``."""

    def __init__(self, pieces: list[str], slots: list[tuple[bool, str, str]]) -> None:
        self.pieces, self.slots = pieces, slots  # slots: (in args, key, the value's text)

    def text(self, event: dict, moved: dict) -> str:
        parts = [self.pieces[0]]
        for (in_args, key, original), piece in zip(self.slots, self.pieces[1:], strict=True):
            old, new = (event["args"][key], moved["args"][key]) if in_args else (event[key], moved[key])
            parts += [original if new == old else json.dumps(new, ensure_ascii=False), piece]
        return "".join(parts)


def _template(body: str, event: dict) -> _Template:
    """Where in ``body`` (the event's text) the scalar values of ``_OWN_SLOTS`` (in the event
    itself) and ``_ARG_SLOTS`` (in its ``args``) lie."""
    pieces, slots, last = [], [], 0
    stack: list[tuple[str, str | None]] = []  # per open container: "{" or "[", the key it is under
    key: str | None = None
    expect_key = False
    for token in _TOKEN.finditer(body):
        t = token.group()
        if t in ("{", "["):
            stack.append((t, key))
            expect_key, key = t == "{", None
        elif t in ("}", "]"):
            stack.pop()
            expect_key, key = False, None
        elif t == ":":
            expect_key = False
        elif t == ",":
            expect_key, key = stack[-1][0] == "{", None
        elif expect_key:
            key = json.loads(t)
        else:
            own = len(stack) == 1 and key in _OWN_SLOTS
            in_args = len(stack) == 2 and stack[1] == ("{", "args") and key in _ARG_SLOTS
            if own or (in_args and isinstance(event.get("args"), dict)):
                pieces.append(body[last:token.start()])
                slots.append((in_args, key, t))
                last = token.end()
    pieces.append(body[last:])
    return _Template(pieces, slots)


def write_kineto(root: Path, real: Path, size: int) -> int:
    """One Kineto trace of ``size`` bytes from ``KINETO`` (ResNet-50 on one GPU, steps #5-#10)."""
    (sample,) = (real / KINETO).glob("*.pt.trace.json*")
    return write_tiled(sample, root / "worker0.tiled.pt.trace.json", size)


def write_kineto_serving(root: Path, real: Path, size: int) -> int:
    """One Kineto trace of ``size`` bytes from ``KINETO_SERVING`` (vLLM serving on a B200: no step)."""
    (sample,) = (real / KINETO_SERVING).glob("*.json*")
    return write_tiled(sample, root / "eager.tiled.pt.trace.json", size)


def write_torch_npu(root: Path, real: Path, size: int) -> int:
    """One torch_npu rank folder (as the profiler lays it out, without the analysis CSVs) whose
    ``trace_view.json`` is ``TORCH_NPU``'s rank 0's, ``size`` bytes."""
    source = real / TORCH_NPU / "rank0_ascend_pt"
    folder = root / "rank0_ascend_pt"
    (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True, exist_ok=True)
    for name in ("profiler_info_0.json", "profiler_metadata.json"):
        shutil.copyfile(source / name, folder / name)
    return write_tiled(source / "ASCEND_PROFILER_OUTPUT" / "trace_view.json",
                       folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", size)


def write_paddle(root: Path, real: Path, size: int) -> int:
    """One Paddle Chrome export of ``size`` bytes from ``PADDLE`` (CPU, steps #3-#7)."""
    (sample,) = (real / PADDLE).glob("*.paddle_trace.json")
    return write_tiled(sample, root / sample.name, size)
