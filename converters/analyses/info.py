"""What a profile holds, before converting it: ``trace2perfetto info``.

One read of every rank (as a detail conversion would, one step at a time) gathers per rank its
format, device and host, graphs and their steps with time ranges, lanes per layer, record
counts, input bytes, each host's clock offset as the collectives show it, and an estimate of the
output size of summary and detail, so a user can
choose ``--steps`` and ``--ranks`` under the size cap.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from ..comm import HostClock, OpComm, clock_offsets, host_names, light_ops, match
from ..errors import Diagnostics, as_text
from ..executor import LOCAL, Where
from ..model import Layer, RankInfo
from ..profile import Kind, Options, Profile, input_bytes, read_profile
from .overlap import overlap_slices
from .render import cell, clock_records, print_clocks, print_table, size

# Perfetto bytes per slice, fitted on the real samples and generated profiles of every format
# (within 15% of each): summary slices carry no args (~57 B); a detail slice ~20 B plus 0.6 B per
# byte of its args as JSON (interned names and strings make it less than their text).
_SUMMARY_BYTES, _SAMPLE_BYTES = 58, 24
_DETAIL_BYTES, _DETAIL_BYTES_PER_ARGS_BYTE = 20, 0.6


@dataclass
class StepRange:
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
    steps: list[StepRange] = field(default_factory=list)
    lanes: dict[str, list[str]] = field(default_factory=dict)  # layer -> lane names
    records: dict[str, int] = field(default_factory=dict)  # layer -> slices (and "Counters")
    estimated_bytes: dict[str, int] = field(default_factory=dict)  # kind -> Perfetto bytes


@dataclass
class ProfileContents:
    path: str
    ranks: list[RankContents]
    warnings: list[str]
    clocks: list[HostClock] = field(default_factory=list)  # per host, from the collectives' ends

    @property
    def estimated_bytes(self) -> dict[str, int]:
        return {kind: sum(r.estimated_bytes[kind] for r in self.ranks) for kind in ("summary", "detail")}


def profile_info(path: str | os.PathLike[str], *, ranks: Iterable[int] | None = None,
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
    ops = {contents.rank: mine for contents, mine in found}
    clocks = clock_offsets(match(ops), host_names(profile.ranks)) if len(profile.ranks) > 1 else []
    return ProfileContents(as_text(path), [contents for contents, _ in found], profile.diag.messages(),
                           clocks)


def rank_contents(info: RankInfo, options: Options, diag: Diagnostics) -> tuple[RankContents, list[OpComm]]:
    """One rank's contents, and its communication ops (for the clock offsets). Runs in a worker."""
    ops: list[OpComm] = []
    contents = RankContents(
        info.rank, info.format, as_text(info.path), info.device, info.host, input_bytes(info),
        {name: list(ranks) for name, ranks in info.groups.items()},
        as_text(info.host_paths[0]) if info.host_paths else None,
    )
    lanes: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    summary = detail = samples = 0
    for batch in read_profile([info], options, diag):
        if batch.step is not None:
            contents.steps.append(StepRange(batch.graph, batch.step_id, batch.step.start_ns,
                                            batch.step.end_ns))
        elif batch.figures is not None:  # a step the profiler's analysis names, bounds not recorded
            contents.steps.append(StepRange(batch.graph, batch.step_id, None, None))
        for s in batch.slices:
            lanes.setdefault(s.layer.value, set()).add(s.lane)
            counts[s.layer.value] = counts.get(s.layer.value, 0) + 1
            if s.layer.is_summary:
                summary += 1
            else:
                detail += _DETAIL_BYTES + _DETAIL_BYTES_PER_ARGS_BYTE * _args_bytes(s.args)
        summary += len(overlap_slices(batch))
        ops += light_ops(batch.rank, batch.graph, batch.step_id, batch.key,
                         (s for s in batch.slices if s.layer is Layer.COMM_OP))
        samples += len(batch.samples)
    if samples:
        counts["Counters"] = samples
    order = {layer.value: layer.order for layer in Layer}
    contents.lanes = {layer: sorted(lanes[layer]) for layer in sorted(lanes, key=order.__getitem__)}
    contents.records = counts
    contents.estimated_bytes = {
        "summary": summary * _SUMMARY_BYTES,
        "detail": summary * _SUMMARY_BYTES + round(detail) + samples * _SAMPLE_BYTES,
    }
    return contents, ops


def _args_bytes(args: object) -> int:
    """The length of a slice's args as JSON (raw JSON as the reader kept it, or a dict)."""
    if args is None:
        return 0
    return len(orjson.dumps(args)) if isinstance(args, dict) else len(args)


def print_info(contents: ProfileContents, fmt: str) -> None:
    """``info``'s output on stdout: the JSON document (``schemas/info.schema.json``), or a table of
    the ranks with the estimated output sizes and each rank's steps under it."""
    if fmt == "json":
        document = {"path": contents.path, "estimated_bytes": contents.estimated_bytes,
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
            cell(r.device), cell(r.host), ",".join(map(str, graphs)) or "-", str(len(r.steps)),
            str(len(r.lanes.get("Ascend Hardware", []))), str(len(r.lanes.get("HCCL", []))),
            f"{sum(r.records.values()):,}", size(r.input_bytes), size(r.estimated_bytes["summary"]),
            size(r.estimated_bytes["detail"]),
        ])
    print_table(rows)
    total = contents.estimated_bytes
    print(f"\nestimated output (Perfetto): summary {size(total['summary'])}, "
          f"detail {size(total['detail'])}; the default --max-size is 20 MiB")
    for r in contents.ranks:
        if r.steps:
            first, last = r.steps[0], r.steps[-1]
            span = (f"{(last.end_ns - first.start_ns) / 1e9:.3f} s from the first step to the end of the last"
                    if first.start_ns is not None and last.end_ns is not None else
                    "their bounds not recorded (the profiler's analysis only)")
            print(f"rank {r.rank}: steps {first.step}-{last.step}, {span}")
    print_clocks(contents.clocks, aligned=False)
