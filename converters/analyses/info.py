"""What a profile holds, before converting it: ``trace2perfetto info``.

One read of every rank (as a detail conversion would, one step at a time) gathers per rank its
format, device and host, graphs and their steps with time ranges, lanes per layer, record
counts, input bytes, each host's clock offset as the collectives show it, and an estimate of the
output size of summary and detail as each format (``.pftrace``, ``.json``, ``.json.gz``), so a user
can choose ``--steps``, ``--ranks`` and the format under the size cap.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from ..errors import Diagnostics, as_text
from ..executor import LOCAL, Where
from ..model import Layer, RankInfo, Sample, Slice
from ..profile import Kind, Options, Profile, input_bytes, overlap_slices, read_profile
from .render import cell, clock_records, print_clocks, print_table, size

# ``communication`` is imported where a rank has collectives and where several ranks are matched:
# a profile of one rank, or of no collectives, needs none of it (issue 44's start-up).
if TYPE_CHECKING:
    from ..communication import HostClock, OpComm

# The output's size per format, from what it will hold, with costs fitted on the real samples
# (tests/test_what_a_user_reads.py: within 25% of what converting writes, each format and kind).
# Perfetto interns names and strings: a slice costs a few bytes, each distinct name and string
# once, each arg key and number a few bytes. Chrome JSON: the writer's record of each event, its
# name and args as their text. Compressed JSON: the JSON estimate times the ratio zlib (as the
# writer deflates) gives the records as written (each lane's in time order), up to ``_GZ_TEXT``.
_PF = {"slice": 57, "summary slice": 55, "flow": 15, "name byte": 1.57, "key": 5.75, "string byte": 1.37,
       "number": 1.67, "sample": 34, "lane": 340, "summary lane": 60, "rank": 300}
_JSON = {"slice": 66, "args": 9, "flow": 116, "counter event": 84, "value": 18, "lane": 110, "rank": 250}
_GZ_TEXT = 64 << 20
# Slices of one kind measured one by one; each one past them costs their mean (its lane, if new, is
# still counted): the estimate, per slice in Python, cost 3.5x a detail conversion of HTA's 54 MB
# df_index_resolver trace, and a long run's steps are alike
_MEASURED = 50_000
_GZIP = 18  # its header and trailer
FORMATS = (".pftrace", ".json", ".json.gz")
KINDS = ("summary", "detail")


class _Sizes:
    """What one rank adds to each output format's size, per kind (``estimate``)."""

    def __init__(self, label: str) -> None:
        self.pftrace = {kind: 0.0 for kind in KINDS}
        self.json = {kind: 0.0 for kind in KINDS}
        self.pftrace["summary"] = _PF["rank"] + len(label)
        self.json["summary"] = _JSON["rank"] + len(label)
        self.names: set[str] = set()
        self.strings: set[str] = set()
        self.lanes: dict[str, set[tuple]] = {kind: set() for kind in KINDS}
        self.written: dict[str, set[tuple]] = {kind: set() for kind in KINDS}  # lanes of the deflated sample
        self.measured = {kind: [0, 0.0, 0.0] for kind in KINDS}  # slices measured one by one, their bytes
        self.text = {kind: 0 for kind in KINDS}  # the JSON records' bytes deflated so far, and what they made
        self.deflated = {kind: 0 for kind in KINDS}
        self.deflate = {kind: zlib.compressobj(6, zlib.DEFLATED, -15) for kind in KINDS}
        self._deflate("summary", b'{"ph":"M","name":"process_name","pid":1,"args":{"name":"Rank 0"}},\n'
                      b'{"ph":"M","name":"process_sort_index","pid":1,"args":{"sort_index":0}},\n'
                      b'{"ph":"M","name":"process_labels","pid":1,"args":{"labels":%s}},\n'
                      % orjson.dumps(label))

    def add(self, slices: list[Slice], kind: str) -> None:
        """A step's slices of one kind (summary: the step trace and overlap lanes): each measured
        up to ``_MEASURED`` of the kind (a step of more: an even sample of it), the others at the
        mean of those; every new lane counted."""
        self._lanes_of(slices, kind)
        measured, rest = self.measured[kind], len(slices)
        if (room := _MEASURED - measured[0]) > 0:
            sample = slices if len(slices) <= room else slices[::-(-len(slices) // room)]
            before = self.pftrace[kind], self.json[kind]
            self._measure(sample, kind)
            measured[0] += len(sample)
            measured[1] += self.pftrace[kind] - before[0]
            measured[2] += self.json[kind] - before[1]
            rest -= len(sample)
        if rest:
            self.pftrace[kind] += rest * measured[1] / measured[0]
            self.json[kind] += rest * measured[2] / measured[0]

    def _lanes_of(self, slices: list[Slice], kind: str) -> None:
        """What the lanes of these slices not met before add to each format."""
        lanes, pf, json = self.lanes[kind], 0.0, 0.0
        for s in slices:
            if (s.layer, s.lane) not in lanes:
                lanes.add((s.layer, s.lane))
                pf += (_PF["summary lane"] if kind == "summary" else _PF["lane"]) + len(s.lane)
                json += _JSON["lane"] + len(s.lane)
        self.pftrace[kind] += pf
        self.json[kind] += json

    def _measure(self, slices: list[Slice], kind: str) -> None:
        pf = json = 0.0
        records, written = [], self.written[kind]
        for s in sorted(slices, key=lambda s: (s.layer.order, s.lane, s.start_ns)):
            args, name = _args_text(s.args), orjson.dumps(s.name)
            flows = len(s.flows_out) + len(s.flows_in)
            if (s.layer, s.lane) not in written:
                written.add((s.layer, s.lane))
                records.append(b'{"ph":"M","name":"thread_name","pid":1,"tid":%d,"args":{"name":%s}},\n'
                               % (len(written), orjson.dumps(s.lane)))
            if kind == "summary":
                pf += _PF["summary slice"] + (self._interned(args) if args else 0)
            else:
                pf += _PF["slice"] + _PF["flow"] * flows + (self._interned(args) if args else 0)
                if s.name not in self.names:
                    self.names.add(s.name)
                    pf += _PF["name byte"] * len(name)
            json += (_JSON["slice"] + len(name) + (len(args) + _JSON["args"] if args else 0)
                     + _JSON["flow"] * flows)
            if self.text[kind] < _GZ_TEXT:
                records.append(b'{"ph":"X","pid":1,"tid":%d,"name":%s,"ts":%d.%03d,"dur":%d.%03d%s},\n' % (
                    len(written), name, *divmod(s.start_ns, 1000), *divmod(s.dur_ns, 1000),
                    b',"args":' + args if args else b""))
        if records:
            self._deflate(kind, b"".join(records))
        self.pftrace[kind] += pf
        self.json[kind] += json

    def _interned(self, args: bytes) -> float:
        """A slice's args in Perfetto's bytes: each key and number a few, each string once."""
        try:
            found = orjson.loads(args)
        except orjson.JSONDecodeError:
            return _PF["string byte"] * len(args)
        cost, stack = 0.0, [found]
        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                cost += _PF["key"] * len(value)
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
            elif isinstance(value, str):
                if value not in self.strings:
                    self.strings.add(value)
                    cost += _PF["string byte"] * len(value)
            else:
                cost += _PF["number"]
        return cost

    def add_samples(self, samples: list[Sample]) -> None:
        """A step's counter values (detail only). Chrome JSON writes the values at one time of the
        lanes of one name (a lane's text to its last space) as one event, each value a key in it
        (``writers.chrome_json``): an event's bytes, then each value's."""
        self.pftrace["detail"] += len(samples) * _PF["sample"]
        at_once = Counter((v.lane, v.start_ns) for v in samples)
        events: dict[tuple[str, int], int] = {}  # (name, time) -> events: a lane's values at a time apart
        for (lane, ts), n in at_once.items():
            at = (_series(lane)[0], ts)
            events[at] = max(events.get(at, 0), n)
        self.json["detail"] += sum(events.values()) * _JSON["counter event"] + len(samples) * _JSON["value"]
        if samples and self.text["detail"] < _GZ_TEXT:
            record = b'{"ph":"C","pid":1,"name":%s,"ts":%d.%03d,"args":{%s:%r}},\n'
            texts = []
            for v in samples:
                name, key = _series(v.lane)
                us, ns = divmod(v.start_ns, 1000)
                texts.append(record % (orjson.dumps(name), us, ns, orjson.dumps(key), v.value))
            self._deflate("detail", b"".join(texts))

    def _deflate(self, kind: str, text: bytes) -> None:
        self.text[kind] += len(text)
        self.deflated[kind] += len(self.deflate[kind].compress(text))

    def estimate(self) -> dict[str, dict[str, int]]:
        """Bytes per kind and format; detail holds the summary too."""
        ratio = {}
        for kind in KINDS:
            self.deflated[kind] += len(self.deflate[kind].flush())
            ratio[kind] = self.deflated[kind] / self.text[kind] if self.text[kind] else 0.0
        out = {}
        for kind, parts in (("summary", ("summary",)), ("detail", KINDS)):
            out[kind] = {".pftrace": round(sum(self.pftrace[p] for p in parts)),
                         ".json": round(sum(self.json[p] for p in parts)),
                         ".json.gz": _GZIP + round(sum(self.json[p] * ratio[p] for p in parts))}
        return out


def _series(lane: str) -> tuple[str, str]:
    """A counter lane as the JSON writer's C event holds it: (name, arg key), split at the lane's
    last space; without one, the lane and ``value`` (``_chrome_json_core.c`` ``lane_of``)."""
    name, _, key = lane.rpartition(" ")
    return (name, key) if name else (lane, "value")


def _with_waits(contents: RankContents, waits: list[Slice]) -> None:
    """A rank's estimate with its Wait slices (the conversion draws them where the collectives of
    several ranks meet, on a lane of their own), in every kind and format."""
    if not waits:
        return
    json = _JSON["lane"] + sum(_JSON["slice"] + _JSON["args"] + len(w.name) + len(orjson.dumps(w.args))
                               for w in waits)
    added = {".pftrace": _PF["summary lane"] + len(waits) * (_PF["summary slice"] + 3 * _PF["key"]),
             ".json": json, ".json.gz": json * _WAIT_DEFLATED}
    for sizes in contents.estimated_by_format.values():
        for fmt, more in added.items():
            sizes[fmt] += round(more)
    contents.estimated_bytes = {kind: by[".pftrace"] for kind, by in contents.estimated_by_format.items()}


_WAIT_DEFLATED = 0.15  # a Wait slice's record, deflated among the others


def _args_text(args: object) -> bytes:
    """A slice's args as the JSON writer writes them: raw JSON as the reader kept it, less the white
    space outside its strings (``_chrome_json_core.put_compact``, by a regex here: ``info`` loads no
    writer, tests/test_startup.py), or a dict's."""
    if args is None:
        return b""
    if isinstance(args, dict):
        return orjson.dumps(args)
    raw = bytes(args)
    if b" " not in raw and b"\n" not in raw and b"\t" not in raw and b"\r" not in raw:
        return raw
    if b"\\" in raw:  # an escaped quote, maybe: the strings by the regex
        return _STRING_OR_SPACE.sub(_string, raw)
    parts = raw.split(b'"')  # no escape: every other part is a string's (5x faster than the regex)
    parts[::2] = [b"".join(outside.split()) for outside in parts[::2]]
    return b'"'.join(parts)


_STRING_OR_SPACE = re.compile(rb'("(?:[^"\\]|\\.)*")|[ \t\n\r]+')


def _string(match: re.Match[bytes]) -> bytes:
    return match[1] or b""


@dataclass
class StepRange:
    """One step of a rank, with its bounds."""

    graph: int | None
    step: int | None
    start_ns: int | None  # None: not recorded (a rank with only the profiler's analysis files)
    end_ns: int | None


@dataclass
class RankContents:
    """One rank's profile at a glance."""

    rank: int
    format: str
    path: str
    device: int | None
    host: str | None
    input_bytes: int
    groups: dict[str, list[int]]
    host_info: str | None = None  # the MindSpore host_info file read with this rank, if any
    device_name: str | None = None  # the device's model where the profile names it
    steps: list[StepRange] = field(default_factory=list)
    lanes: dict[str, list[str]] = field(default_factory=dict)  # layer -> lane names
    records: dict[str, int] = field(default_factory=dict)  # layer -> slices (and "Counters")
    estimated_bytes: dict[str, int] = field(default_factory=dict)  # kind -> Perfetto bytes
    estimated_by_format: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> format -> bytes


@dataclass
class ProfileContents:
    """The kept ranks' contents, what was said while reading them, and their hosts' clocks."""

    path: str
    ranks: list[RankContents]
    warnings: list[str]
    clocks: list[HostClock] = field(default_factory=list)  # per host, from the collectives' ends

    @property
    def estimated_bytes(self) -> dict[str, int]:
        return {kind: sum(r.estimated_bytes[kind] for r in self.ranks) for kind in KINDS}

    @property
    def estimated_by_format(self) -> dict[str, dict[str, int]]:
        """Per kind and output format (``.pftrace``, ``.json``, ``.json.gz``), the bytes converting
        the kept ranks and steps would write."""
        return {kind: {f: sum(r.estimated_by_format[kind][f] for r in self.ranks) for f in FORMATS}
                for kind in KINDS}


def info_report(path: str | os.PathLike[str], *, ranks: Iterable[int] | None = None,
                 graphs: Iterable[int] | None = None, steps: Iterable[int] | None = None,
                 step_marker: str | None = None,
                 where: Where = LOCAL) -> ProfileContents:
    """Everything ``info`` shows about the kept ranks, graphs and steps of the profile under
    ``path`` (the estimates are those of converting just them); each rank is read by a worker of
    this machine or of a Dask cluster (``where``).

    Raises:
        UsageError: unknown ranks, graphs or steps, nothing recognisable under ``path``.
        InputError: an input file broken beyond recovery.
    """
    options = Options(ranks=ranks, graphs=graphs, steps=steps, kind=Kind.DETAIL, step_marker=step_marker)
    profile = Profile.open(path, options, where=where)
    found = profile.map(rank_contents)
    profile.check_steps()
    clocks: list[HostClock] = []
    if len(profile.ranks) > 1:  # one rank's collectives match no other's: no clocks, no waits
        from ..communication import clock_offsets, host_names, match, wait_slices

        clocks = clock_offsets(match({contents.rank: mine for contents, mine in found}),
                               host_names(profile.ranks))
        for contents, mine in found:  # the Wait slices of the collectives matched across ranks (match's)
            _with_waits(contents, wait_slices(mine))
    return ProfileContents(as_text(path), [contents for contents, _ in found], profile.diag.messages(),
                           clocks)


def rank_contents(info: RankInfo, options: Options, diag: Diagnostics) -> tuple[RankContents, list[OpComm]]:
    """One rank's contents, and its communication ops (for the clock offsets). Runs in a worker."""
    ops: list[OpComm] = []
    contents = RankContents(
        info.rank, info.format, as_text(info.path), info.device, info.host, input_bytes(info),
        {name: list(ranks) for name, ranks in info.groups.items()},
        as_text(info.host_paths[0]) if info.host_paths else None, info.device_name,
    )
    lanes: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    samples = 0
    sizes = _Sizes(f"{info.format} profile {as_text(info.path)}; times: {info.clock}")
    for batch in read_profile([info], options, diag):
        if batch.step is not None:
            contents.steps.append(StepRange(batch.graph, batch.step_id, batch.step.start_ns,
                                            batch.step.end_ns))
        elif batch.figures is not None:  # a step the profiler's analysis names, bounds not recorded
            contents.steps.append(StepRange(batch.graph, batch.step_id, None, None))
        for s in batch.slices:
            lanes.setdefault(s.layer.value, set()).add(s.lane)
            counts[s.layer.value] = counts.get(s.layer.value, 0) + 1
        sizes.add([*(s for s in batch.slices if s.layer.is_summary), *overlap_slices(batch)], "summary")
        sizes.add([s for s in batch.slices if not s.layer.is_summary], "detail")
        sizes.add_samples(batch.samples)
        if comm := [s for s in batch.slices if s.layer is Layer.COMM_OP]:
            from ..communication import light_ops

            ops += light_ops(batch.rank, batch.graph, batch.step_id, batch.key, comm)
        samples += len(batch.samples)
    if samples:
        counts["Counters"] = samples
    order = {layer.value: layer.order for layer in Layer}
    contents.lanes = {layer: sorted(lanes[layer]) for layer in sorted(lanes, key=order.__getitem__)}
    contents.records = counts
    contents.estimated_by_format = sizes.estimate()
    contents.estimated_bytes = {kind: by[".pftrace"] for kind, by in contents.estimated_by_format.items()}
    return contents, ops


def _device(r: RankContents) -> str:
    """The Device column: the device's number and model, as far as the profile says them."""
    if r.device_name is None:
        return cell(r.device)
    return r.device_name if r.device is None else f"{r.device} ({r.device_name})"


def print_info(contents: ProfileContents, fmt: str) -> None:
    """``info``'s output on stdout: the JSON document (``schemas/info.schema.json``), or a table of
    the ranks with the estimated output sizes and each rank's steps under it."""
    if fmt == "json":
        document = {"path": contents.path, "estimated_bytes": contents.estimated_bytes,
                    "estimated_by_format": contents.estimated_by_format,
                    "ranks": [dataclasses.asdict(r) for r in contents.ranks],
                    "clocks": clock_records(contents.clocks)}
        sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    header = ["Rank", "Format", "Device", "Host", "Graphs", "Steps", "Streams", "Planes", "Records",
              "Input", "Summary~", "Detail~"]
    rows = [header]
    for r in contents.ranks:
        graphs = sorted({s.graph for s in r.steps if s.graph is not None})
        rows.append([
            str(r.rank), r.format + (" + host_info" if r.host_info and r.format != "host_info" else ""),
            _device(r), cell(r.host), ",".join(map(str, graphs)) or "-", str(len(r.steps)),
            str(len(r.lanes.get("Ascend Hardware", []))), str(len(r.lanes.get("HCCL", []))),
            f"{sum(r.records.values()):,}", size(r.input_bytes), size(r.estimated_bytes["summary"]),
            size(r.estimated_bytes["detail"]),
        ])
    print_table(rows)
    total = contents.estimated_by_format
    print("\nestimated output: " + "; ".join(
        f"{kind} " + ", ".join(f"{size(total[kind][f])} as {f}" for f in FORMATS) for kind in KINDS) +
        "; the default --max-size is 20 MiB")
    for r in contents.ranks:
        if r.steps:
            first, last = r.steps[0], r.steps[-1]
            span = (f"{(last.end_ns - first.start_ns) / 1e9:.3f} s from the first step to the end of the last"
                    if first.start_ns is not None and last.end_ns is not None else
                    "their bounds not recorded (the profiler's analysis only)")
            print(f"rank {r.rank}: steps {first.step}-{last.step}, {span}")
    print_clocks(contents.clocks, aligned=False)
