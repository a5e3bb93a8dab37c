"""The rank behind the barrier: where every rank's step lasts as long because one rank's
collectives wait for another (DDP's gradient all-reduce waits for the slowest backward), the
verdict names the rank that held them and the time fixing it would save, from the slowest steps'
critical paths (``critical.py``; docs/analysis.md, section 6), instead of the generic straggler line.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...readers.passes import is_backward
from .text import ms, ms_text

if TYPE_CHECKING:
    from ..critical import StepPath
    from .types import Report, SlowStep

GENERIC = " kept the others waiting"  # the generic straggler clause (``diagnosis.verdict``) it replaces


@dataclass(frozen=True, slots=True)
class HeldBack:
    """The rank whose late arrival is the first what-if of most of the slowest steps' paths."""

    rank: int
    phase: str | None  # "backward": most of its compute on those paths is in the backward pass
    saved_ns: float  # the mean of those what-ifs' savings: what it held every rank back by a step
    steps: int  # the slow steps where it is the first what-if ...
    of: int  # ... of those whose path is known

    @property
    def sentence(self) -> str:
        who = f"rank {self.rank}'s {self.phase}" if self.phase else f"rank {self.rank}"
        return f"{who} held every rank back by {ms_text(self.saved_ns)} a step"

    def record(self) -> dict[str, Any]:
        return {"rank": self.rank, "phase": self.phase, "saved_ms": ms(self.saved_ns), "steps": self.steps,
                "of": self.of, "sentence": self.sentence}


def held_back(slow: list[SlowStep]) -> HeldBack | None:
    """The rank whose arriving with the others is the first what-if of more than half of the slow
    steps whose path is known; None where no rank is."""
    known = [s.found for s in slow if s.found is not None]
    firsts = [(p, p.what_if[0]) for p in known if p.what_if and p.what_if[0].kind == "late_arrival"]
    if not firsts:
        return None
    rank, count = Counter(w.rank for _, w in firsts).most_common(1)[0]
    if 2 * count <= len(known):
        return None
    mine = [(p, w) for p, w in firsts if w.rank == rank]
    return HeldBack(rank, _phase(rank, [p for p, _ in mine]), statistics.fmean(w.saved_ns for _, w in mine),
                    count, len(known))


def _phase(rank: int, paths: list[StepPath]) -> str | None:
    """"backward" where more than half of the rank's compute on the paths runs in the backward
    pass (``readers.passes``), else None (the input says no pass, or the time lies elsewhere)."""
    compute = [s for p in paths for s in p.path if s.rank == rank and s.kind == "compute"]
    total = sum(s.dur_ns for s in compute)
    backward = sum(s.dur_ns for s in compute if is_backward(s.name))
    return "backward" if total and 2 * backward > total else None


def named_straggler(verdict: dict[str, Any], report: Report) -> dict[str, Any]:
    """``verdict`` (``diagnosis.verdict``) with ``held_back``, and where the job is a straggler's
    and the rank it names is one of the stragglers, the generic clause ("rank 1-2 kept the others
    waiting") said as the critical path says it ("rank 2's backward held every rank back by 58.8 ms
    a step")."""
    found = held_back(report.critical)
    stragglers = {d.rank for d in report.diagnoses if d.kind == "straggler"}
    if found is None or verdict["dominant"] != "straggler" or found.rank not in stragglers:
        return {**verdict, "held_back": None}
    head, generic, rest = verdict["summary"].partition(GENERIC)
    summary = f"Straggler: {found.sentence}{rest}" if generic and head.startswith("Straggler: ") else \
        verdict["summary"]
    return {**verdict, "summary": summary, "held_back": found.record()}
