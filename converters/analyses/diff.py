"""``trace2perfetto diff BASE NEW``: what changed from one run to another, per step phase, per op
type, per op name, per framework op (the device time of the kernels each launched) or per
communication op type and group, with a noise check (docs/analysis.md, "diff").

Each side is read as ``overlap``, ``ops`` and ``comm`` read it
(``overlap.overlap_row``/``step_span``, ``ops.accumulate``, ``communication.step_ops`` per step), giving one
sample per rank and step of every figure. A row sets the two sides' samples side by side: their
means, the delta of the means, and whether that delta stands out of the steps' own noise (``noise``,
``significant``): ``noise`` is the larger of K robust standard deviations (1.4826 × MAD) of the
base's own step-to-step values and FLOOR of the base's mean: the base says what chance looks like,
so a regression that also makes the steps uneven (one slow rank) cannot hide in its own spread; a
run against itself shows nothing, and one step a side (no spread to measure) needs a change beyond
FLOOR.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import communication
from ..errors import Diagnostics, UsageError
from ..executor import LOCAL, Where
from ..model import HASHED_GROUP, Layer, RankInfo, StepRecords
from ..profile import Kind, Options, Profile, folded, plus, read_profile
from ..readers import for_ops
from ..select import format_ids
from . import ops, overlap
from .launches import Launchers

BY = ("step", "type", "name", "comm", "op")
K = 3.0  # robust standard deviations of the steps' own spread a delta must exceed
FLOOR = 0.05  # and this share of the base's mean (what one step a side cannot tell from noise)
MAD_TO_SIGMA = 1.4826  # the MAD of normal samples times this is their standard deviation
PHASES = ("Step Time", "Computing", "Communication(Not Overlapped)", "Free", "Preparing")
DEVICE, HOST = "device", "host"
# --by op: what a row's name is (its Kind): the framework op that launched the kernels, the op family
# of kernels no framework op launched (across formats), or such a kernel's own name
FRAMEWORK_OP, FAMILY, KERNEL = "framework op", "op family", "kernel"
# and how its two sides were matched (Matched)
MATCHED_BY = {FRAMEWORK_OP: "by framework op", FAMILY: "by family", KERNEL: "by name"}
UNMATCHED = "unmatched"
FAMILIES = Path(__file__).with_name("op_families.json")


@dataclass(frozen=True)
class Side:
    """One run to compare: its path and the ranks and steps kept (None: all), and the range that
    is its step where its profiler marks none (``--step-marker``)."""

    path: str | os.PathLike[str]
    ranks: Iterable[int] | None = None
    steps: Iterable[int] | None = None
    step_marker: str | None = None


@dataclass(frozen=True)
class CommParts:
    """``--by comm``: what a row's communication ops add up to besides their time (Elapse): their
    Wait and Transit (ns; None where no op of them has plane tasks to measure it) and their transit
    size and time over every transport (for the bandwidth)."""

    wait_ns: int | None = None
    transit_ns: int | None = None
    size_bytes: int = 0
    transport_ns: int = 0

    def __add__(self, other: CommParts) -> CommParts:
        return CommParts(_plus(self.wait_ns, other.wait_ns), _plus(self.transit_ns, other.transit_ns),
                         self.size_bytes + other.size_bytes, self.transport_ns + other.transport_ns)

    @property
    def gb_per_s(self) -> float | None:
        """Bytes per ns is GB/s; None where no transit was timed."""
        return round(self.size_bytes / self.transport_ns, 4) if self.transport_ns else None


def _plus(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


@dataclass(frozen=True)
class StepSample:
    """What one step of one rank gives: its phases (ns, None where unknown; in ``PHASES`` order) and,
    for ``--by type``/``name``/``comm``, its ops: (name, kind) -> (count, total ns); by comm the
    name is the op's type, the kind its group, and ``comm`` holds the rest of their figures."""

    rank: int
    step: int | None
    phases: tuple[int | None, ...]
    ops: dict[tuple[str, str], tuple[int, int]]
    comm: dict[tuple[str, str], CommParts] = dataclasses.field(default_factory=dict)
    typed: bool = True  # by type: the input names some device task's op type (``ops.typed``)


@dataclass(frozen=True)
class Figure:
    """One figure of one side: its samples (one per rank and step; ns), and, for ops, their count."""

    samples: tuple[int, ...]
    count: int | None = None
    # ops: their time outside every step of a side that has steps (its pseudo step: before the
    # first, after the last, launched in none): in the totals, in no step's sample
    outside: int = 0

    @property
    def total(self) -> int:
        return sum(self.samples) + self.outside

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def mad(self) -> float:
        """The median absolute deviation from the median (0 for fewer than two samples)."""
        if len(self.samples) < 2:
            return 0.0
        middle = statistics.median(self.samples)
        return statistics.median(abs(x - middle) for x in self.samples)


@dataclass(frozen=True)
class DiffRow:
    """One row: a phase (``--by step``), an op type or an op name, both sides' figures (ns); by
    comm, an op type and its group (``kind``), with the rest of both sides' figures."""

    name: str
    kind: str  # "step", "device" or "host"; by comm the group; by op FRAMEWORK_OP, FAMILY or KERNEL
    base: Figure
    new: Figure
    base_comm: CommParts | None = None
    new_comm: CommParts | None = None
    # False: a side cannot have it (it records no op types, and the other side's type is absent
    # from it for that reason): never significant
    judged: bool = True
    # False: one side's samples are steps, the other's whole captures (it marks none): the
    # per-step figures do not compare (``steps_compare``); totals and shares still do
    comparable: bool = True
    via: str | None = None  # ops: how its two sides met where both have it (``MATCHED_BY``'s values)
    # ops: the row's share of each side's device time (%; None for host rows, or no device time)
    shares: tuple[float | None, float | None] = (None, None)

    @property
    def delta_mean(self) -> float | None:
        """The new mean minus the base's (a side without samples counts 0 for ops, unknown for phases)."""
        base, new = self.base.mean, self.new.mean
        if not self.comparable:
            return None
        if self.kind != "step":
            base, new = base or 0.0, new or 0.0
        return None if base is None or new is None else new - base

    @property
    def delta_total(self) -> int:
        return self.new.total - self.base.total

    @property
    def delta_pct(self) -> float | None:
        """The delta of the means against the base's mean, in %; None where the base is 0 or unknown."""
        delta, base = self.delta_mean, self.base.mean
        return None if delta is None or not base else delta / base * 100

    @property
    def noise(self) -> float | None:
        return noise(self.base, self.new) if self.comparable else None

    @property
    def matched(self) -> str:
        """Ops: how the row's two sides were matched (by framework op, family, name or type),
        ``UNMATCHED`` where one side has none of it."""
        if not (self.base.count and self.new.count):
            return UNMATCHED
        return self.via or MATCHED_BY.get(self.kind, MATCHED_BY[KERNEL])

    @property
    def significant(self) -> bool:
        return self.judged and significant(self.delta_mean, self.noise)


def noise(base: Figure, new: Figure) -> float | None:
    """How far the means may differ by chance: K robust standard deviations of the base's
    step-to-step spread, and at least FLOOR of the base's mean (of the new one's where the base has
    none: an op that appears, whose base is all zeros)."""
    reference = base if base.mean is not None and base.count != 0 else new
    if reference.mean is None:
        return None
    return max(K * MAD_TO_SIGMA * reference.mad, FLOOR * abs(reference.mean))


def significant(delta: float | None, noise_ns: float | None) -> bool:
    """A delta is significant when it is beyond the noise (strictly: no change is never one)."""
    return delta is not None and noise_ns is not None and abs(delta) > noise_ns


# -- reading one side -----------------------------------------------------------------------------

def side_samples(info: RankInfo, options: Options, diag: Diagnostics, by: str) -> list[StepSample]:
    """One rank's samples, read as ``overlap`` reads it for phases, as ``ops`` for ops, in detail for
    the framework ops that launched the kernels (by op). Runs in a worker process."""
    if by == "op":  # detail: the host ops, and their arrows to the kernels
        launchers = Launchers()
        steps = read_profile([info], dataclasses.replace(options, kind=Kind.DETAIL), diag)
        return list(folded(((batch.part, launched_sample(info.rank, batch, launchers)) for batch in steps),
                           joined_samples))
    if by == "step":
        steps = read_profile([info], options, diag)
    elif by == "comm":  # detail: the plane tasks
        steps = read_profile([info], dataclasses.replace(options, kind=Kind.DETAIL), diag)
    else:
        info, detail = for_ops(info)
        kind = Kind.DETAIL if detail else Kind.SUMMARY
        steps = read_profile([info], dataclasses.replace(options, kind=kind), diag)
    return list(folded(((batch.part, sample(info.rank, batch, by)) for batch in steps), joined_samples))


def joined_samples(a: StepSample, b: StepSample) -> StepSample:
    """The samples of two parts of a pseudo step as one (``profile.folded``): their figures added."""
    ops = dict(a.ops)
    for key, (count, total) in b.ops.items():
        held = ops.get(key, (0, 0))
        ops[key] = (held[0] + count, held[1] + total)
    comm = dict(a.comm)
    for key, parts in b.comm.items():
        comm[key] = comm[key] + parts if key in comm else parts
    return dataclasses.replace(a, phases=tuple(plus(x, y) for x, y in zip(a.phases, b.phases, strict=True)),
                               ops=ops, comm=comm, typed=a.typed or b.typed)


def sample(rank: int, batch: StepRecords, by: str) -> StepSample:
    """One step's sample: its phases (``--by step``), or its ops summed by type or name."""
    if by == "step":
        row = overlap.overlap_row(batch)
        phases = (overlap.step_span(batch)[1], row.computing_ns, row.not_overlapped_ns, row.free_ns,
                  row.preparing_ns)
        return StepSample(rank, batch.step_id, phases, {})
    if by == "comm":
        return comm_sample(rank, batch)
    summed = ops.accumulate(rank, [batch], by)
    found: dict[tuple[str, str], tuple[int, int]] = {}
    for kind, figures in ((DEVICE, summed.device), (HOST, summed.host)):
        for (name, _core, _), (count, total, *_) in figures.items():
            held = found.get((name, kind), (0, 0))
            found[(name, kind)] = (held[0] + count, held[1] + total)
    typed = by != "type" or any(ops.typed(s) for s in batch.slices if s.layer is Layer.STREAM)
    return StepSample(rank, batch.step_id, (), found, typed=typed)


def launched_sample(rank: int, batch: StepRecords, launchers: Launchers) -> StepSample:
    """One step's compute kernels summed by the framework op that launched them (``FRAMEWORK_OP``),
    each kernel no framework op launched under its own name (``KERNEL``). ``launchers``: the
    rank's, given its steps in time order."""
    found: dict[tuple[str, str], tuple[int, int]] = {}
    for kernel, op in launchers.kernels(batch):
        key = (kernel.name, KERNEL) if op is None else (op, FRAMEWORK_OP)
        held = found.get(key, (0, 0))
        found[key] = (held[0] + 1, held[1] + kernel.dur_ns)
    return StepSample(rank, batch.step_id, (), found)


def comm_sample(rank: int, batch: StepRecords) -> StepSample:
    """One step's communication ops summed by type and group: count and Elapse, and their parts."""
    found: dict[tuple[str, str], tuple[int, int]] = {}
    parts: dict[tuple[str, str], CommParts] = {}
    for op in communication.step_ops(batch):
        key = (op.kind, op.group)  # what it does, the same across vendors (``model.comm_kind``)
        held = found.get(key, (0, 0))
        found[key] = (held[0] + 1, held[1] + op.elapse_ns)
        moved = list(op.transports.values())
        parts[key] = parts.get(key, CommParts()) + CommParts(
            op.wait_ns, op.transit_ns, sum(t.size_bytes for t in moved), sum(t.time_ns for t in moved))
    return StepSample(rank, batch.step_id, (), found, parts)


def read_side(side: Side, by: str, graphs: Iterable[int] | None, diag: Diagnostics,
              where: Where) -> tuple[list[StepSample], set[str]]:
    """Every kept step of every kept rank of one side, and the formats it was read from."""
    profile = Profile.open(side.path, Options(ranks=side.ranks, graphs=graphs, steps=side.steps,
                                              step_marker=side.step_marker), where=where, diag=diag)
    formats = {info.format for info in profile.ranks}
    found: list[list[StepSample]] = profile.map(side_samples, lambda *_: (by,))
    profile.check_steps()
    samples = [s for rank in found for s in rank]
    return (placed_groups(samples) if by == "comm" else samples), formats


def placed_groups(samples: list[StepSample]) -> list[StepSample]:
    """By comm: each HCCL group (named by a hash of its own, another in every run: "hccl group 868"
    in one, "hccl group 271" in the next for the same all-reduce) named by its place in the job:
    the ranks that ran its ops ("ranks 0-7"), where several groups share them with their op types
    ("ranks 0-7 (allgather+allreduce)"), where still several with the order they first ran in
    ("#2"). Other groups (a process group's name, a stream) are the same in every run and stay."""
    ranks: dict[str, set[int]] = defaultdict(set)
    types: dict[str, set[str]] = defaultdict(set)
    for s in sorted(samples, key=lambda s: (s.step is not None, s.step or 0, s.rank)):  # first run first
        for kind, group in s.ops:
            if group.startswith(HASHED_GROUP):
                ranks[group].add(s.rank)
                types[group].add(kind)
    by_ranks: dict[str, list[str]] = defaultdict(list)
    for group in ranks:
        by_ranks[format_ids(ranks[group])].append(group)
    names = {}
    for place, groups in by_ranks.items():
        for group in groups:
            name = f"ranks {place}"
            alike = [g for g in groups if types[g] == types[group]]
            if len(groups) > 1:
                name += f" ({'+'.join(sorted(types[group]))})"
            if len(alike) > 1:
                name += f" #{alike.index(group) + 1}"
            names[group] = name
    if not names:
        return samples
    return [dataclasses.replace(s, ops={(k, names.get(g, g)): v for (k, g), v in s.ops.items()},
                                comm={(k, names.get(g, g)): v for (k, g), v in s.comm.items()})
            for s in samples]


# -- the comparison --------------------------------------------------------------------------------

def compare(base: Sequence[StepSample], new: Sequence[StepSample], by: str,
            families: dict[str, str] | None = None) -> list[DiffRow]:
    """The rows of two sides' samples, largest regression (Delta of the totals, or of the means by
    step) first. ``families``: op names mapped to their family before matching (across vendors; by
    op only the kernels no framework op launched, whose rows are then the family's)."""
    comparable = steps_compare(base, new)
    if by == "step":
        rows = [DiffRow(phase, "step", _phase(steps_of(base), i), _phase(steps_of(new), i),
                        comparable=comparable) for i, phase in enumerate(PHASES)]
        return sorted(rows, key=lambda r: (r.delta_mean is None, -(r.delta_mean or 0.0), r.name))
    sides = (_ops(base, families, by), _ops(new, families, by))
    keys = sorted(set(sides[0]) | set(sides[1]))
    rows = [DiffRow(*key, *(_op_figure(side.get(key), len(steps_of(steps)))
                            for side, steps in zip(sides, (base, new), strict=True)),
                    *((_comm_parts(base, key), _comm_parts(new, key)) if by == "comm" else ()),
                    comparable=comparable, via=None if by == "comm" else _via(key, by, families))
            for key in keys]
    if by != "comm":
        rows = _with_shares(rows)
    return sorted(rows, key=lambda r: (-r.delta_total, r.name, r.kind))


def is_step(s: StepSample) -> bool:
    return s.step is not None


def steps_of(samples: Sequence[StepSample]) -> list[StepSample]:
    """The samples that are steps: of a side that marks steps, its steps (its pseudo step, the
    activity outside them, is no step); of a side that marks none, its whole captures (one a rank)."""
    stepped = [s for s in samples if is_step(s)]
    return stepped if stepped else list(samples)


def steps_compare(base: Sequence[StepSample], new: Sequence[StepSample]) -> bool:
    """Whether the sides' per-step figures compare: not where one side's samples are steps and the
    other's whole captures (a capture of 50 steps is not one slower step)."""
    return not (base and new) or any(map(is_step, base)) == any(map(is_step, new))


def _via(key: tuple[str, str], by: str, families: dict[str, str] | None) -> str:
    """How an op row's two sides met, where both have it: by framework op, by family (across
    formats, a name of a family), by name (or op type, by type)."""
    name, kind = key
    if by == "op":
        return MATCHED_BY.get(kind, MATCHED_BY[KERNEL])
    if families is not None and name in set(families.values()):
        return MATCHED_BY[FAMILY]
    return "by type" if by == "type" else MATCHED_BY[KERNEL]


def _with_shares(rows: list[DiffRow]) -> list[DiffRow]:
    """Each device row with its share of each side's device time (every row but host operators')."""
    device = [r for r in rows if r.kind != HOST]
    totals = [sum(r.base.total for r in device), sum(r.new.total for r in device)]

    def share(ns: int, total: int) -> float | None:
        return round(ns / total * 100, 3) if total else None

    return [r if r.kind == HOST else dataclasses.replace(
        r, shares=(share(r.base.total, totals[0]), share(r.new.total, totals[1]))) for r in rows]


def _comm_parts(samples: Sequence[StepSample], key: tuple[str, str]) -> CommParts:
    return functools.reduce(CommParts.__add__, (s.comm[key] for s in samples if key in s.comm), CommParts())


def _phase(samples: Sequence[StepSample], index: int) -> Figure:
    return Figure(tuple(s.phases[index] for s in samples if s.phases[index] is not None))


def _ops(samples: Sequence[StepSample], families: dict[str, str] | None,
         by: str = "type") -> dict[tuple[str, str], list]:
    """Per (name, kind): [count, the per-step totals (0 in a step without it; ``steps_of``), the
    time outside the steps]."""
    steps = {id(s): index for index, s in enumerate(steps_of(samples))}
    found: dict[tuple[str, str], list] = defaultdict(lambda: [0, [0] * len(steps), 0])
    for s in samples:
        index = steps.get(id(s))
        for (name, kind), (count, total) in s.ops.items():
            held = found[_matched_key(name, kind, families, by) if families else (name, kind)]
            held[0] += count
            if index is None:
                held[2] += total
            else:
                held[1][index] += total
    return found


def _matched_key(name: str, kind: str, families: dict[str, str], by: str) -> tuple[str, str]:
    """The row an op joins across formats: its family's (by op: only a kernel no framework op
    launched, and then under the kind ``FAMILY``)."""
    if by != "op":
        return families.get(name, name), kind
    return (families[name], FAMILY) if kind == KERNEL and name in families else (name, kind)


def _op_figure(held: list | None, steps: int) -> Figure:
    return Figure(tuple(held[1]), held[0], held[2]) if held else Figure((0,) * steps, 0)


@functools.lru_cache(maxsize=1)
def _family_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    table = json.loads(FAMILIES.read_text(encoding="utf-8"))["families"]
    return tuple((family, re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE))
                 for family, patterns in table)


def family_of(name: str) -> str | None:
    """The op family a name belongs to (``op_families.json``: the first whose patterns it matches)."""
    return next((family for family, pattern in _family_patterns() if pattern.search(name)), None)


def families_of(samples: Iterable[StepSample], by: str = "type") -> dict[str, str]:
    """Each op name of these samples that belongs to a family, with its family (by op: each kernel
    no framework op launched)."""
    names = {name for s in samples for name, kind in s.ops if by != "op" or kind == KERNEL}
    return {name: family for name in names if (family := family_of(name)) is not None}


# -- the driver -----------------------------------------------------------------------------------

def diff_report(
    base: Side,
    new: Side,
    *,
    by: str = "step",
    graphs: Iterable[int] | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> list[DiffRow]:
    """The rows comparing ``new`` with ``base`` (``by`` one of ``BY``). Where the two sides come from
    different formats (torch_npu against Kineto), op names are matched by family
    (``op_families.json``) and what stayed unmatched is said in a warning in ``diag``; by op,
    kernels by the framework op that launched them, by family (across formats) or by name those no
    framework op launched, and a note says how much of each side's device time matched how.

    Raises:
        UsageError: an unknown ``by``, unknown ranks or graphs, nothing recognisable under a path.
        InputError: an input file broken beyond recovery.
    """
    if by not in BY:
        raise UsageError(f"--by: {by!r} is not one of {', '.join(BY)}")
    diag = diag if diag is not None else Diagnostics()
    base_samples, base_formats = read_side(base, by, graphs, diag, where)
    new_samples, new_formats = read_side(new, by, graphs, diag, where)
    for label, samples in (("BASE", base_samples), ("NEW", new_samples)):
        if by == "comm" and not any(s.ops for s in samples):
            diag.warn("diff_no_ops", f"{label}: the input records no communication ops in the kept steps: "
                      "nothing to compare by comm", label)
        elif by == "op" and not any(s.ops for s in samples):
            diag.warn("diff_no_ops", f"{label}: the input records no device kernels in the kept steps: "
                      "nothing to compare by the framework op that launched them", label)
        elif by != "step" and not any(s.ops for s in samples):
            diag.warn("diff_no_ops", f"{label}: the input records no device tasks (nor host operators) in "
                      "the kept steps: nothing to compare by op", label)
    families = None
    if by in ("type", "name", "op") and base_formats != new_formats:
        families = families_of(base_samples, by) | families_of(new_samples, by)
    _say_steps(base_samples, new_samples, diag)
    rows = compare(base_samples, new_samples, by, families)
    if by == "type":
        rows = _judged_by_type(rows, base_samples, new_samples, diag)
    if by in ("type", "name", "op"):
        diag.note("diff_matched", matched_line(rows, by))
    if by != "op" and families is not None:
        _say_unmatched(rows, base_formats, new_formats, diag)
    return rows


def _say_steps(base: list[StepSample], new: list[StepSample], diag: Diagnostics) -> None:
    """What the steps compared leave out: a side's activity outside its steps (no step), and every
    per-step figure where one side marks no steps."""
    for label, samples in (("BASE", base), ("NEW", new)):
        outside = sorted({s.rank for s in samples if not is_step(s)})
        if outside and any(map(is_step, samples)):
            diag.warn("diff_outside_steps", f"{label}: the activity outside every step (before the "
                      f"first, after the last, or launched in none; rank {format_ids(outside)}) is no step: "
                      "left out of the per-step figures (means, medians, noise; --by step), counted in the "
                      "totals by op", label)
    if not steps_compare(base, new):
        whole = "BASE" if any(map(is_step, new)) else "NEW"
        diag.warn("diff_whole_capture", f"{whole} marks no steps (each rank's whole capture is one pseudo "
                  "step) and the other run does: the per-step figures do not compare (Delta of the means, "
                  "Delta(%), Noise, Significant: -); compared: each side's own figures, the totals and, by "
                  "op, each row's share of its side's device time (--step-marker NAME marks steps)", "diff")


def _judged_by_type(rows: list[DiffRow], base: list[StepSample], new: list[StepSample],
                    diag: Diagnostics) -> list[DiffRow]:
    """By type: where a side records no op types (torch_npu at profiler level 0: its device ops go
    by task name), a device row found on one side only is absent from the other for that reason,
    not a change: said, and never significant (against a level-0 base every type was "new,
    significant")."""
    untyped = [label for label, samples in (("BASE", base), ("NEW", new))
               if any(kind == DEVICE for s in samples for _, kind in s.ops)
               and not any(s.typed for s in samples)]
    if not untyped:
        return rows
    diag.warn("diff_no_types", f"{' and '.join(untyped)}: the input records no op types of its device tasks "
              "(profiler level 0 records none): its rows go by task name, and a device row on one side "
              "only is not judged (never significant)", "diff")
    return [dataclasses.replace(r, judged=False) if r.kind == DEVICE and not (r.base.count and r.new.count)
            else r for r in rows]


def how_matched(rows: Iterable[DiffRow]) -> dict[str, tuple[int, ...]]:
    """Ops: per way of matching (``MATCHED_BY``'s values, by type, then ``UNMATCHED``) its device
    rows, and of each side the rows holding some of its device time and that time (ns): (rows,
    BASE rows, BASE ns, NEW rows, NEW ns). Host operators' rows are left out (their time nests)."""
    found = {how: [0, 0, 0, 0, 0] for how in (*MATCHED_BY.values(), "by type", UNMATCHED)}
    for row in rows:
        if row.kind == HOST:
            continue
        held = found[row.matched]
        held[0] += 1
        held[1] += row.base.count > 0
        held[2] += row.base.total
        held[3] += row.new.count > 0
        held[4] += row.new.total
    return {how: tuple(figures) for how, figures in found.items()}


def matched_line(rows: Sequence[DiffRow], by: str = "op") -> str:
    """The note of ``--by op``/``type``/``name``: how much of each side's device time matched how,
    and what did not."""
    found = how_matched(rows)
    base_all, new_all = (sum(figures[i] for figures in found.values()) for i in (2, 4))

    def share(ns: int, total: int) -> str:
        return f"{ns / total:.1%}" if total else "-"

    parts = [f"{how}: {rows_} rows, {share(base_ns, base_all)} and {share(new_ns, new_all)}"
             for how, (rows_, _, base_ns, _, new_ns) in found.items() if how != UNMATCHED and rows_]
    _, base_rows, base_ns, new_rows, new_ns = found[UNMATCHED]
    return (f"--by {by}: of BASE's device time ({base_all / 1000:.1f} us) and NEW's "
            f"({new_all / 1000:.1f} us), "
            f"matched {'; '.join(parts) or 'none'}; unmatched: {base_rows} rows only in BASE "
            f"({base_ns / 1000:.1f} us, {share(base_ns, base_all)}), {new_rows} only in NEW "
            f"({new_ns / 1000:.1f} us, {share(new_ns, new_all)})")


def _say_unmatched(rows: list[DiffRow], base_formats: set[str], new_formats: set[str],
                   diag: Diagnostics) -> None:
    matched = sum(1 for r in rows if r.base.count and r.new.count)
    base_only = sum(1 for r in rows if r.base.count and not r.new.count)
    new_only = sum(1 for r in rows if r.new.count and not r.base.count)
    diag.warn("diff_families", f"{'+'.join(sorted(base_formats))} against {'+'.join(sorted(new_formats))}: "
              f"op names matched by family (converters/analyses/op_families.json): {matched} rows on both "
              f"sides; unmatched: {base_only} only in BASE, {new_only} only in NEW (their other side's "
              "count is 0)", "diff")


def regressions(rows: Iterable[DiffRow], by: str, percent: float) -> list[DiffRow]:
    """The rows that fail ``--fail-above percent``: slower than the base by more than ``percent`` and
    significant; by step only the step time counts."""
    return [r for r in rows if (by != "step" or r.name == PHASES[0]) and r.significant
            and r.delta_pct is not None and r.delta_pct > percent]


def named(rows: Sequence[DiffRow], most: int = 5) -> str:
    """The first ``most`` rows' names and Delta(%), for a line on stderr."""
    text = ", ".join(f"{r.name} {r.delta_pct:+.1f}%" for r in rows[:most] if r.delta_pct is not None)
    return text + (" ..." if len(rows) > most else "")


# -- its rows as records ---------------------------------------------------------------------------

STEP_COLUMNS = ("Name", "Base Steps", "New Steps", "Base Mean(us)", "Base Median(us)", "Base Min(us)",
                "Base Max(us)", "New Mean(us)", "New Median(us)", "New Min(us)", "New Max(us)",
                "Delta Time(us)", "Delta(%)", "Noise(us)", "Significant")
OP_COLUMNS = ("Name", "Kind", "Matched", "Base Count", "New Count", "Base Time(us)", "New Time(us)",
              "Base Share(%)", "New Share(%)", "Delta Time(us)", "Delta(%)", "Base Mean(us)", "New Mean(us)",
              "Noise(us)", "Significant")
LAUNCHED_COLUMNS = OP_COLUMNS  # by op: the same columns, Kind and Matched say more


NOTE = (f"(µs; Delta: NEW - BASE, Delta(%) of the means per step; Significant: beyond Noise = max({K:g} x "
        f"1.4826 x the MAD of BASE's steps, {FLOOR:.0%} of BASE's mean))")


def note(rows: Sequence[DiffRow], by: str) -> str:
    """What the table's figures are, and by op, type or name how much of each side's device time
    matched the other's (``matched_line``)."""
    shares = "\n" + matched_line(rows, by) if by in ("type", "name", "op") else ""
    return NOTE + shares


COMM_COLUMNS = ("Name", "Group", "Base Count", "New Count", "Base Time(us)", "New Time(us)", "Delta Time(us)",
                "Delta(%)", "Base Wait(us)", "New Wait(us)", "Delta Wait(us)", "Base Transit(us)",
                "New Transit(us)", "Delta Transit(us)", "Base Bandwidth(GB/s)", "New Bandwidth(GB/s)",
                "Delta Bandwidth(GB/s)", "Base Mean(us)", "New Mean(us)", "Noise(us)", "Significant")


def columns(by: str) -> tuple[str, ...]:
    return {"step": STEP_COLUMNS, "comm": COMM_COLUMNS, "op": LAUNCHED_COLUMNS}.get(by, OP_COLUMNS)


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(ns / 1000, 3)


def record(row: DiffRow) -> dict:
    """One row in µs (to the ns); Delta Time by step is the delta of the means, by op of the totals;
    Delta(%) always of the means per step."""
    pct = None if row.delta_pct is None else round(row.delta_pct, 3)
    tail = {"Delta(%)": pct, "Noise(us)": _us(row.noise), "Significant": row.significant}
    if row.kind == "step":
        sides = {}
        for label, figure in (("Base", row.base), ("New", row.new)):
            samples = figure.samples
            sides |= {f"{label} Mean(us)": _us(figure.mean), f"{label} Median(us)": _us(figure.median),
                      f"{label} Min(us)": _us(min(samples, default=None)),
                      f"{label} Max(us)": _us(max(samples, default=None))}
        return {"Name": row.name, "Base Steps": len(row.base.samples), "New Steps": len(row.new.samples),
                **sides, "Delta Time(us)": _us(row.delta_mean), **tail}
    if row.base_comm is not None and row.new_comm is not None:
        return _comm_record(row, pct, tail)
    return {"Name": row.name, "Kind": row.kind, "Matched": row.matched, "Base Count": row.base.count,
            "New Count": row.new.count,
            "Base Time(us)": _us(row.base.total), "New Time(us)": _us(row.new.total),
            "Base Share(%)": row.shares[0], "New Share(%)": row.shares[1],
            "Delta Time(us)": _us(row.delta_total), "Delta(%)": pct, "Base Mean(us)": _us(row.base.mean),
            "New Mean(us)": _us(row.new.mean), **tail}


def _comm_record(row: DiffRow, pct: float | None, tail: dict) -> dict:
    """A ``--by comm`` row: Time is Elapse; Wait, Transit and Bandwidth summed over the kept steps
    (a delta where both sides know the figure)."""
    base, new = row.base_comm, row.new_comm
    assert base is not None and new is not None

    def delta(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else b - a

    return {"Name": row.name, "Group": row.kind, "Base Count": row.base.count, "New Count": row.new.count,
            "Base Time(us)": _us(row.base.total), "New Time(us)": _us(row.new.total),
            "Delta Time(us)": _us(row.delta_total), "Delta(%)": pct,
            "Base Wait(us)": _us(base.wait_ns), "New Wait(us)": _us(new.wait_ns),
            "Delta Wait(us)": _us(delta(base.wait_ns, new.wait_ns)),
            "Base Transit(us)": _us(base.transit_ns), "New Transit(us)": _us(new.transit_ns),
            "Delta Transit(us)": _us(delta(base.transit_ns, new.transit_ns)),
            "Base Bandwidth(GB/s)": base.gb_per_s, "New Bandwidth(GB/s)": new.gb_per_s,
            "Delta Bandwidth(GB/s)": None if (gbs := delta(base.gb_per_s, new.gb_per_s)) is None
            else round(gbs, 4),
            "Base Mean(us)": _us(row.base.mean), "New Mean(us)": _us(row.new.mean), **tail}
