"""The report's pipeline section: where the job sends and receives (pipeline parallelism), the
schedule its stages ran, each stage's bubble beside the schedule's ideal, the stage that holds the
others up, and the verdict's sentence on it (``pipeline_finding``). From ``analyses.pipeline``'s
detail read of the same ranks and steps (docs/analysis.md §12)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from ...errors import Diagnostics
from ...executor import LOCAL, Where
from ...select import format_ids
from .. import pipeline
from .text import ms

HOST_ONLY = ("the stages' compute is the host's time in each micro-batch (a CPU job's compute is host work); "
             "on a GPU or NPU job a device trace would let it be split into the launches and the device's "
             "execution, which this section does not do")


@dataclass(frozen=True, slots=True)
class StageRow:
    """One stage over the kept steps (and over its ranks, where several pipelines run it)."""

    stage: int
    ranks: tuple[int, ...]
    steps: int  # rank-steps
    step_ns: float
    compute_ns: float | None  # the mean compute a step; None where no step's is known
    bubble: float | None  # the mean bubble as a share of the step (0-1)
    ideal: float | None  # (p-1)/(m+p-1)


@dataclass(frozen=True, slots=True)
class PipelineSection:
    schedule: str  # the schedule most rank-steps show
    schedules: dict[str, int]  # schedule -> rank-steps
    orders: dict[int, str]  # stage -> the order of phases it ran most often
    stages: int
    microbatches: int | None
    found_by: dict[str, int]  # how the micro-batches were found -> rank-steps
    rows: list[StageRow]
    slow: StageRow | None  # the stage with the most compute a step: the one the others wait for
    bubble: float | None  # the mean of the stages' bubble shares
    ideal: float | None
    note: str = HOST_ONLY


def pipeline_section(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    graphs: Iterable[int] | None = None,
    steps: Iterable[int] | None = None,
    step_marker: str | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> PipelineSection | None:
    """The pipeline of the job under ``path`` as the report shows it; None where no stage is found."""
    report = pipeline.pipeline_report(path, ranks=ranks, graphs=graphs, steps=steps, step_marker=step_marker,
                                      diag=Diagnostics() if diag is None else diag, where=where)
    return summarised(report.parts)


def summarised(parts: list[pipeline.StagePart]) -> PipelineSection | None:
    """The stages' rank-steps summed up per stage: their mean step, compute and bubble."""
    staged = [p for p in parts if p.stage is not None and p.stages and p.stages > 1]
    if not staged:
        return None
    rows_of = [pipeline.record(p) for p in staged]
    by_stage: dict[int, list[dict]] = defaultdict(list)
    orders: dict[int, Counter] = defaultdict(Counter)
    for part, row in zip(staged, rows_of, strict=True):
        by_stage[part.stage].append(row)
        orders[part.stage][row["Order"]] += 1
    rows = [_stage_row(stage, found) for stage, found in sorted(by_stage.items())]
    schedules = Counter(p.schedule for p in staged)
    stages = Counter(p.stages for p in staged).most_common(1)[0][0]
    micro = Counter(r["Micro-batches"] for r in rows_of).most_common(1)[0][0] or None
    known = [r for r in rows if r.compute_ns is not None]
    slow = max(known, key=lambda r: r.compute_ns, default=None)
    shares = [r.bubble for r in rows if r.bubble is not None]
    ideal = (stages - 1) / (micro + stages - 1) if micro else None
    return PipelineSection(schedules.most_common(1)[0][0], dict(schedules),
                           {stage: c.most_common(1)[0][0] for stage, c in sorted(orders.items())},
                           stages, micro,
                           dict(Counter(p.found_by for p in staged)), rows, slow,
                           fmean(shares) if shares else None, ideal)


def _stage_row(stage: int, rows: list[dict]) -> StageRow:
    computes = [r["Compute(us)"] * 1000 for r in rows if r["Compute(us)"] is not None]
    bubbles = [r["Bubble(%)"] / 100 for r in rows if r["Bubble(%)"] is not None]
    ideals = [r["Ideal Bubble(%)"] / 100 for r in rows if r["Ideal Bubble(%)"] is not None]
    return StageRow(stage, tuple(sorted({r["Rank"] for r in rows})), len(rows),
                    fmean(r["Step Time(us)"] * 1000 for r in rows), fmean(computes) if computes else None,
                    fmean(bubbles) if bubbles else None, fmean(ideals) if ideals else None)


def pipeline_finding(section: PipelineSection | None) -> str | None:
    """The verdict's sentence on the pipeline: its bubble as a share of the step beside the
    schedule's ideal, and the slow stage; None where the job runs no pipeline."""
    if section is None:
        return None
    parts = []
    if section.bubble is not None:
        text = f"pipeline bubble: {section.bubble:.0%} of the step"
        if section.ideal is not None:
            points = (section.bubble - section.ideal) * 100
            whose = f"{section.schedule}'s ideal" if section.schedule != pipeline.UNKNOWN else "the ideal"
            text += (f", {abs(points):.0f} points {'above' if points >= 0 else 'below'} {whose} with "
                     f"{section.microbatches} micro-batches ({section.ideal:.0%} on {section.stages} stages)")
        parts.append(text)
    else:
        parts.append(f"pipeline of {section.stages} stages ({section.schedule}): its bubble is unknown "
                     "(a micro-batch's bounds the records do not give)")
    slow = section.slow
    if slow is not None and len([r for r in section.rows if r.compute_ns is not None]) > 1:
        others = [r.compute_ns for r in section.rows if r is not slow and r.compute_ns is not None]
        parts.append(f"stage {slow.stage} is the slow stage (rank {format_ids(slow.ranks)}: "
                     f"{slow.compute_ns / 1e6:.1f} ms of compute a step, "
                     f"{slow.compute_ns / fmean(others):.1f}x the others' mean)")
    if section.schedule == pipeline.UNKNOWN:
        parts.append("schedule not recognised; the order seen: " +
                     "; ".join(f"stage {s}: {order}" for s, order in section.orders.items()))
    return "; ".join(parts) + "."


def pipeline_json(section: PipelineSection) -> dict[str, Any]:
    """The section's numbers (ms; shares 0-1; ``schemas/report.schema.json``'s ``pipeline``)."""
    return {
        "schedule": section.schedule, "schedules": section.schedules, "stages": section.stages,
        "microbatches": section.microbatches, "found_by": section.found_by,
        "bubble_share": _round(section.bubble), "ideal_share": _round(section.ideal),
        "slow_stage": None if section.slow is None else section.slow.stage,
        "orders": {str(stage): order for stage, order in section.orders.items()},
        "by_stage": [{"stage": r.stage, "ranks": list(r.ranks), "rank_steps": r.steps,
                      "step_ms": ms(r.step_ns),
                      "compute_ms": ms(r.compute_ns), "bubble_share": _round(r.bubble),
                      "ideal_share": _round(r.ideal)} for r in section.rows],
        "note": section.note,
    }


HEADER = ["Stage", "Ranks", "Rank-steps", "Step (ms)", "Compute (ms)", "Bubble", "Ideal", "Above ideal",
          "Order"]


def table_rows(section: PipelineSection) -> list[list[Any]]:
    """The HTML table's rows, one per stage (``HEADER``)."""
    def share(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    return [[r.stage, format_ids(r.ranks), r.steps, _ms(r.step_ns), _ms(r.compute_ns), share(r.bubble),
             share(r.ideal),
             "-" if None in (r.bubble, r.ideal) else f"{(r.bubble - r.ideal) * 100:+.1f} pts",
             section.orders.get(r.stage, "")] for r in section.rows]


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
