"""The report's types: what it knows of each step of each rank (``StepFacts``), the device ops
(``OpTotal``, ``RankOpTypes``), the slowest collectives and steps (``SlowCollective``,
``SlowStep``), the findings (``Thresholds``, ``Diagnosis``) and the whole report (``Report``).
The modules that compute them import this one, and it imports none of them: the report's read is
``data.py``, its diagnosis ``diagnosis.py``, its detail read ``critical.py``."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ... import communication
from ...model import StepKey
from ..comm import SlowRank, StepSpread
from ..comm_matrix import MatrixReport
from ..critical import SEGMENT_KINDS, StepPath, WhatIf
from ..memory import PeakRow
from ..ops import OpRow
from ..overlap import StepOverlap
from .baseline import Baseline
from .pipelined import PipelineSection
from .text import change, ms_text

DATA_LOADING_SOURCES = ("Dataloader", "Iteration Interval")  # phases that are data loading
NO_DEVICE_WORK = "no device work recorded"  # why a slow step's path is unknown, where nothing else says
NAMED = 3  # what-ifs named per step in the verdict
WHAT_IFS = 10  # what-ifs kept per step in the report (every one: ``trace2perfetto critical``)
TARGET_CHARS = 80  # of an op's name in a sentence (the JSON's ``target``: all of it)


@dataclass(slots=True)
class StepFacts:
    """One step of one rank: its bounds, the overlap row, the profiler's phases (ns by name, each
    the union of its slices) and, once matched across ranks, the wait it suffered and caused."""

    rank: int
    graph: int | None
    step: int | None
    start_ns: int
    step_ns: int  # the step's bounds (host or step trace), else its first to last device work
    host_start: bool
    overlap: StepOverlap
    phases: dict[str, int] = field(default_factory=dict)
    wait_suffered_ns: int = 0
    wait_caused_ns: int = 0
    waited_for: dict[int, int] = field(default_factory=dict)  # last rank -> wait for it, in this step
    wait_spans: list[tuple[int, int, int]] = field(default_factory=list)  # (last rank, start, end), each wait
    last_arrivals: int = 0  # collectives of this step in which this rank came last (with a skew)
    key: StepKey | None = None  # the step as the job names it (graph and step above: as the rank does)
    data: dict[str, float] = field(default_factory=dict)  # MindData counters at its start (dataprep.py)

    @property
    def has_device(self) -> bool:
        return self.overlap.computing_ns is not None

    @property
    def other_ns(self) -> int | None:
        """From the last device work to the step's end (never negative); None without device."""
        o = self.overlap
        if o.computing_ns is None:
            return None
        busy = (o.preparing_ns or 0) + o.computing_ns + o.not_overlapped_ns + o.free_ns
        return max(0, self.step_ns - busy)

    def exposed_wait_for(self, ranks: Iterable[int]) -> int:
        """This step's not-overlapped communication spent waiting for any of ``ranks``: the union of
        its waits for them (each from its op's start, cut at the op's end: collectives that overlap
        each other count their common wait once), at most the not-overlapped communication (a wait
        lies within communication, and its part under compute is not exposed). A part of that
        communication, so the verdict's share of it never passes 100% (docs/analysis.md section 6)."""
        wanted = set(ranks)
        covered, reach = 0, None
        for start, end in sorted((s, e) for last, s, e in self.wait_spans if last in wanted):
            if reach is None or start > reach:
                covered, reach = covered + end - start, end
            elif end > reach:
                covered, reach = covered + end - reach, end
        return min(covered, self.overlap.not_overlapped_ns or 0)

    @property
    def data_loading(self) -> tuple[str, int] | None:
        """The largest of the data-loading measures this input gives: (source, ns)."""
        found = [(name, self.phases[name]) for name in DATA_LOADING_SOURCES if name in self.phases]
        if self.overlap.preparing_ns is not None:
            found.append(("Preparing", self.overlap.preparing_ns))
        return max(found, key=lambda item: item[1]) if found else None


@dataclass(frozen=True, slots=True)
class OpTotal:
    """A device compute op (by name) over the kept steps: how often it ran and for how long."""

    name: str
    count: int
    total_ns: int

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


@dataclass(frozen=True, slots=True)
class RankOpTypes:
    """One rank's device op time by op type (``trace2perfetto ops``' rows): its rows of the job's
    top types (``Report.op_types_shown``, in that order; a type it did not run is absent, not 0),
    and the rest summed."""

    rank: int
    total_ns: int  # all its rows: the base of their shares
    shown: list[OpRow]
    other_types: int
    other_count: int
    other_ns: int


@dataclass(frozen=True, slots=True)
class SlowCollective:
    """One collective instance across its ranks: arrival skew, the last rank, the others' wait."""

    group: str
    step: int | None
    name: str
    occurrence: int
    ranks: int
    skew_ns: int
    last_rank: int
    total_wait_ns: int


@dataclass
class Report:
    """Everything the report shows, computed from one summary read of every kept rank."""

    path: str
    formats: dict[str, list[int]]  # reader format -> its ranks
    ranks: list[int]
    hosts: dict[int, str | None]  # None: not known from the profile
    input_bytes: int
    wall_clock: bool  # False: some ranks on clocks of their own, no wall time (comparable only if aligned)
    thresholds: Thresholds
    steps: list[StepFacts]  # every step judged: the kept steps, or the whole run where none is marked
    outside: list[StepFacts]  # activity outside any step (where steps are marked): shown, not judged
    diagnoses: list[Diagnosis]
    slow_ranks: list[SlowRank]
    spread: list[StepSpread]
    wait_matrix: dict[int, dict[int, int]]  # waiting rank -> rank waited for -> ns, over the steps
    collectives: int  # instances matched across two ranks or more
    slowest_collectives: list[SlowCollective]
    top_ops: list[OpTotal]  # over every kept rank, most total time first
    top_ops_by_rank: dict[int, list[OpTotal]]
    compute_ns: int  # all device compute op time (the ops' durations added up), the ops' shares' base
    compute_ns_by_rank: dict[int, int]
    op_types_shown: list[tuple[str, str]]  # (op type, core type): the top OP_TYPES_SHOWN over the kept ranks
    op_types: list[RankOpTypes]  # per rank that has any, as ``trace2perfetto ops`` counts them
    clocks: list[communication.HostClock]
    aligned: bool
    selection: dict[str, list[int] | None]  # ranks, graphs, steps as asked
    warnings: list[str] = field(default_factory=list)
    inputs: list[Path] = field(default_factory=list)  # what was read: the report is never written over it
    links: MatrixReport | None = None  # the links ranked (a detail read, no rows); None: no communication ops
    # Device memory of the whole collection (``analyses.memory``): the peaks per rank and component,
    # and each one's peak kind over time (ns, bytes; thinned, the peak kept). Empty: none recorded.
    memory: list[PeakRow] = field(default_factory=list)
    memory_series: dict[tuple[int, str], list[tuple[int, float]]] = field(default_factory=dict)
    baseline: Baseline | None = None  # ``--baseline``: what changed from that run
    critical: list[SlowStep] = field(default_factory=list)  # the slowest steps' critical paths (critical.py)
    pipeline: PipelineSection | None = None  # where the job sends and receives: its stages (pipelined.py)

    @property
    def span_ns(self) -> tuple[int, int] | None:
        """From the first step's start to the last one's end; None if no step has a known time."""
        timed = [f for f in self.steps + self.outside if f.step_ns > 0]
        if not timed:
            return None
        return (min(f.start_ns for f in timed), max(f.start_ns + f.step_ns for f in timed))

    def findings(self) -> dict[tuple[int, int | None, int | None], list[Diagnosis]]:
        """The diagnoses by (rank, graph, step)."""
        found: dict[tuple, list[Diagnosis]] = defaultdict(list)
        for d in self.diagnoses:
            found[d.rank, d.graph, d.step].append(d)
        return found

    def dominant(self) -> dict[tuple[int, int | None, int | None], str]:
        """Per (rank, graph, step), the one finding it is coloured by: a straggler first (the cause
        lies on that rank), else the bound with the largest share of the step; if none, "balanced"
        where the device's side is known, else "unknown"."""
        found = self.findings()
        return {(f.rank, f.graph, f.step): dominant_kind(found.get((f.rank, f.graph, f.step), []),
                                                         f.has_device) for f in self.steps}


@dataclass(frozen=True)
class Thresholds:
    """Where a step counts as bound by one thing. Shares are of the step time (its host or step
    trace bounds). Change them with ``report_data(..., thresholds=Thresholds(host_idle_share=0.4))``
    or ``--threshold host_idle_share=0.4``; the report prints the ones it used."""

    data_loading_share: float = 0.2
    host_idle_share: float = 0.3
    device_compute_share: float = 0.9
    communication_share: float = 0.3
    straggler_wait_share: float = 0.1
    straggler_step_excess: float = 0.2

    MEANING: ClassVar[dict[str, str]] = {
        "data_loading_share": "data loading: the profiler's Dataloader phase, its Iteration Interval, or "
        "Preparing (host step start to the first device work), whichever is largest, at least this share "
        "of the step",  # where MindData records the data queue, it decides (_data_loading; said in the
        # report's Data preparation section, which only such inputs have)
        "host_idle_share": "host bound: the device idle (Free between its tasks, plus after its last task "
        "until the step ends; no compute, no communication) at least this share of the step",
        "device_compute_share": "device bound: compute (the union of the device's compute tasks) at least "
        "this share of the step",
        "communication_share": "communication bound: communication not overlapped with compute at least "
        "this share of the step",
        "straggler_wait_share": "straggler: the wait this rank caused the others in the step's "
        "collectives, per other rank, at least this share of the median step time",
        "straggler_step_excess": "straggler: its step time above the median rank's by at least this "
        "share (2 ranks or more in the step)",
    }

    @classmethod
    def setting(cls, text: str) -> tuple[str, float]:
        """``NAME=NUMBER`` as ``--threshold`` takes it: one threshold and its value.

        Raises:
            ValueError: no such threshold, no number, or a negative one (the message says which).
        """
        name, _, value = text.partition("=")
        names = [f.name for f in dataclasses.fields(cls)]
        if name not in names:
            raise ValueError(f"{name!r} is not one of {', '.join(names)}")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{text!r}: expected NAME=NUMBER") from None
        if number < 0:
            raise ValueError(f"{text!r}: a threshold is >= 0")
        return name, number

    def items(self) -> list[tuple[str, float, str]]:
        """(name, value, meaning) of each threshold, in order."""
        return [(f.name, getattr(self, f.name), self.MEANING[f.name]) for f in dataclasses.fields(self)]


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One finding for one step of one rank: which bound, how much of the step (``share``), the
    numbers it rests on, one sentence, and the command that writes that rank and step's trace."""

    kind: str  # one of KINDS
    rank: int
    graph: int | None
    step: int | None
    share: float
    evidence: dict[str, Any]
    summary: str
    command: str


def dominant_kind(found: list[Diagnosis], known: bool) -> str:
    """The one of a step's findings it is coloured by (``Report.dominant``). ``known``: the step's
    device side is known, so no finding means no bottleneck (the host, device and communication
    bounds rest on it: without it, none passing says nothing)."""
    if not found:
        return "balanced" if known else "unknown"
    stragglers = [d for d in found if d.kind == "straggler"]
    return "straggler" if stragglers else max(found, key=lambda d: d.share).kind


@dataclass(frozen=True, slots=True)
class SlowStep:
    """One of the job's slowest steps: its time as the report gives it (its slowest rank's), and
    its critical path over the kept ranks; ``found`` None: no rank recorded device work in it."""

    key: StepKey | None
    graph: int | None  # as its lowest rank names it
    step: int | None  # None: the whole run (the job marks no steps)
    step_ns: int
    slowest_rank: int
    found: StepPath | None
    name: str  # as the verdict names it: "step 52", "step 3 of graph 1", "the whole run"
    unknown: str = NO_DEVICE_WORK  # why ``found`` is None

    @property
    def what_if(self) -> list[WhatIf]:
        return [] if self.found is None else self.found.what_if[:WHAT_IFS]

    def by_rank_and_kind(self) -> dict[tuple[int, str], int]:
        """The path's time per (rank, kind), ranks in order, kinds in ``KINDS``' order."""
        found: dict[tuple[int, str], int] = defaultdict(int)
        for s in [] if self.found is None else self.found.path:
            found[s.rank, s.kind] += s.dur_ns
        return dict(sorted(found.items(), key=lambda item: (item[0][0], SEGMENT_KINDS.index(item[0][1]))))

    @property
    def summary(self) -> str:
        """One sentence: the step, its time, and the top what-ifs with what each would save."""
        head = f"{self.name} ({ms_text(self.step_ns)})"
        if self.found is None:
            return f"{head}: {self.unknown}, so its critical path is unknown"
        tops = self.found.what_if[:NAMED]
        if not tops:
            return f"{head}: no change the critical path offers saves time"
        said = (f"{change(w, TARGET_CHARS)} would save {ms_text(w.saved_ns)}" for w in tops)
        return f"{head}: " + "; ".join(said)
