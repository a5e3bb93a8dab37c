"""The report's diagnosis: the findings of each step of each rank (``diagnose``, with the
``types.Thresholds``) and the job's verdict (``verdict``), as the package's docstring defines them.

It reads the steps' facts (``types.StepFacts``) and the report (``types.Report``) only through
their attributes.
"""

from __future__ import annotations

import shlex
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ...model import StepKey
from ...select import format_ids
from .barrier import named_straggler
from .dataprep import queue_at_start
from .pipelined import pipeline_finding
from .text import ms, ms_text
from .types import Diagnosis, Report, StepFacts, Thresholds

KINDS = ("straggler", "data_loading", "communication", "host", "device")
KIND_TITLES = {"straggler": "Straggler", "data_loading": "Data loading", "communication": "Communication",
               "host": "Host", "device": "Device", "balanced": "No bottleneck", "unknown": "Not recorded"}


# -- the diagnosis --------------------------------------------------------------------------------

def diagnose(facts: list[StepFacts], thresholds: Thresholds,
             command: Callable[[StepFacts], str] = lambda f: "") -> list[Diagnosis]:
    """The findings of every step of every rank (see the module's docstring), in rank, graph and
    step order; ``command(facts)`` gives each its trace command."""
    peers = _peers(facts)
    out: list[Diagnosis] = []
    for f in sorted(facts, key=_order):
        if f.step_ns <= 0:
            continue
        cmd = command(f)
        for kind, share, evidence, summary in _findings(f, peers(f), thresholds):
            out.append(Diagnosis(kind, f.rank, f.graph, f.step, round(share, 4),
                                 {"step_ms": ms(f.step_ns), **evidence}, summary, cmd))
    return out


def _findings(f: StepFacts, peers: list[StepFacts], t: Thresholds) -> Iterable[tuple[str, float, dict, str]]:
    """(kind, share, evidence, sentence) of each threshold one step of one rank passes."""
    step, o = f.step_ns, f.overlap
    if len(peers) > 1:
        median = statistics.median(p.step_ns for p in peers)
        per_other = f.wait_caused_ns / (len(peers) - 1)
        wait_share = per_other / median if median else 0.0
        excess = f.step_ns / median - 1 if median else 0.0
        if wait_share >= t.straggler_wait_share or excess >= t.straggler_step_excess:
            reason = (f"the {len(peers) - 1} other ranks waited {ms_text(per_other)} each for it in the "
                      f"collectives ({wait_share:.0%} of the median step)"
                      if wait_share >= t.straggler_wait_share else
                      f"its step took {excess:.0%} longer than the median rank's "
                      f"({ms_text(f.step_ns)} vs {ms_text(median)})")
            yield "straggler", max(wait_share, excess), {
                "wait_caused_ms": ms(f.wait_caused_ns), "wait_caused_per_other_rank_ms": ms(per_other),
                "wait_caused_share": round(wait_share, 4), "last_arrivals": f.last_arrivals,
                "median_step_ms": ms(median), "step_excess": round(excess, 4), "ranks_in_step": len(peers),
            }, f"Straggler: {reason}."
    yield from _data_loading(f, t)
    if o.computing_ns is None:  # no device tasks recorded: the device's side is unknown
        return
    idle = o.free_ns + (f.other_ns or 0)
    if idle / step >= t.host_idle_share:
        yield "host", idle / step, {"free_ms": ms(o.free_ns), "after_last_device_work_ms": ms(f.other_ns),
                                    "device_idle_ms": ms(idle), "share": round(idle / step, 4),
                                    "computing_share": round(o.computing_ns / step, 4)}, \
            f"Host bound: the device was idle {ms_text(idle)} ({idle / step:.0%} of the step) outside " \
            "compute and communication, waiting for the host to give it work."
    if o.computing_ns / step >= t.device_compute_share:
        yield "device", o.computing_ns / step, {"computing_ms": ms(o.computing_ns),
                                                "share": round(o.computing_ns / step, 4)}, \
            f"Device bound: compute covered {o.computing_ns / step:.0%} of the step; the top ops are " \
            "where to look."
    if o.not_overlapped_ns / step >= t.communication_share:
        waited = max(f.waited_for.items(), key=lambda kv: kv[1], default=None)
        exposed = f.exposed_wait_for(f.waited_for)  # a part of the not-overlapped communication
        text = (f"; {ms_text(exposed)} of it waiting for slower ranks (most for rank {waited[0]})"
                if waited else "")
        yield "communication", o.not_overlapped_ns / step, {
            "not_overlapped_ms": ms(o.not_overlapped_ns), "communication_ms": ms(o.communication_ns),
            "share": round(o.not_overlapped_ns / step, 4), "wait_suffered_ms": ms(f.wait_suffered_ns),
            "waited_most_for_rank": waited[0] if waited else None,
        }, f"Communication bound: {ms_text(o.not_overlapped_ns)} ({o.not_overlapped_ns / step:.0%} of the " \
           f"step) in communication not overlapped with compute{text}."


def _data_loading(f: StepFacts, t: Thresholds) -> Iterable[tuple[str, float, dict, str]]:
    """The data-loading finding. Where the data queue is recorded it decides, as MindInsight's
    step-gap analysis reads it: empty at the step's start, the step waited for its batch; holding
    one, the data was ready, whatever the gap. Elsewhere the largest data-loading measure's share."""
    step, loading, queue = f.step_ns, f.data_loading, queue_at_start(f.data)
    if queue is not None and queue[0] > 0:
        return
    if queue is None and (loading is None or loading[1] / step < t.data_loading_share):
        return
    source, ns = loading if loading is not None else (None, 0)
    evidence: dict[str, Any] = {"source": source, "data_loading_ms": ms(ns) if source else None,
                                "share": round(ns / step, 4)}
    text = f"{source} took {ms_text(ns)}, {ns / step:.0%} of the step" if source else ""
    if queue is not None:
        capacity = "" if queue[1] is None else f" of {queue[1]:g}"
        evidence |= {"queue_size": queue[0], "queue_capacity": queue[1]}
        empty = f"the data queue was empty at the step's start (0{capacity} batches)"
        text = f"{empty}; {text}" if text else empty
    yield "data_loading", ns / step, evidence, \
        f"Data loading: {text}" + (", before the device got work." if f.has_device and source else ".")


def _order(f: StepFacts) -> tuple:
    return (f.rank, -1 if f.graph is None else f.graph, -1 if f.step is None else f.step)


def _peers(facts: list[StepFacts]) -> Callable[[StepFacts], list[StepFacts]]:
    """The same step on every rank (``StepKey``: ranks of one job may number their graphs
    differently, and each graph numbers its steps from 1). The pseudo step has no peers."""
    groups: dict[StepKey, list[StepFacts]] = defaultdict(list)
    for f in facts:
        if f.key is not None:
            groups[f.key].append(f)
    return lambda f: [] if f.key is None else groups[f.key]


def trace_command(report: Report, f: StepFacts) -> str:
    """The command that writes the detail trace of exactly this rank and step."""
    parts = ["trace2perfetto", report.path, "--ranks", str(f.rank)]
    name = f"rank{f.rank}"
    if f.graph is not None:
        parts += ["--graphs", str(f.graph)]
        name += f"-graph{f.graph}"
    if f.step is not None:
        parts += ["--steps", str(f.step)]
        name += f"-step{f.step}"
    parts += ["--kind", "detail"]
    if report.aligned:
        parts += ["--align", "collectives"]
    return shlex.join(parts + ["-o", f"{name}.pftrace"])


# -- the verdict ----------------------------------------------------------------------------------

def verdict(report: Report) -> dict[str, Any]:
    """The job's bottleneck: the dominant finding with the most step time, with counts per kind;
    a straggler instead where the others' communication bound steps mostly wait for it (the cause
    lies on the straggler, not on the links). ``look_at``: its worst rank and step. It rests on
    the rank-steps it can judge: those without a finding whose device side is unknown are
    counted apart ("unknown") and said, never taken for balanced. ``what_if``: per slowest step,
    the sentence naming the what-ifs on its critical path that would save most (``critical.py``);
    the rank behind the barrier named as the critical path says it (``barrier.named_straggler``);
    a pipeline's finding after it."""
    counts: Counter[str] = Counter()
    weight: Counter[str] = Counter()
    dominant = report.dominant()
    for f in report.steps:
        kind = dominant[f.rank, f.graph, f.step]
        counts[kind] += 1
        if kind != "unknown":
            weight[kind] += f.step_ns
    found = [k for k in KINDS if counts[k]]
    unjudged, steps = counts["unknown"], len(report.steps) - counts["unknown"]  # steps: those judged
    main = max(found, key=lambda k: weight[k]) if found else "balanced" if steps else "unknown"
    total = sum(weight.values())
    by_kind: dict[str, list[Diagnosis]] = defaultdict(list)
    for d in report.diagnoses:
        by_kind[d.kind].append(d)
    slow = sorted({d.rank for d in by_kind["straggler"]})
    summary = (f"Mostly {KIND_TITLES[main].lower()} bound: the dominant finding in {counts[main]} of {steps} "
               f"rank-steps ({weight[main] / total:.0%} of the step time)." if found else
               "No bottleneck passed its threshold in any step.")
    if main == "straggler":
        # a wait only where the steps it names show one (a straggler by step time alone kept no one
        # waiting that the input shows: on clocks not comparable, the waits are none)
        waited = any(f.wait_caused_ns for f in report.steps if f.rank in slow)
        did = "kept the others waiting" if waited else "took longer than the other ranks"
        summary = (f"Straggler: rank {format_ids(slow)} {did}; the dominant finding in "
                   f"{counts[main]} of {steps} rank-steps.")
    elif main == "communication" and slow:
        bound = {(d.rank, d.graph, d.step) for d in by_kind["communication"]}
        mine = [f for f in report.steps if (f.rank, f.graph, f.step) in bound]
        waiting = sum(f.exposed_wait_for(slow) for f in mine)
        exposed = sum(f.overlap.not_overlapped_ns or 0 for f in mine)
        if exposed and waiting / exposed >= 0.5:
            summary = (f"Straggler: rank {format_ids(slow)} kept the others waiting. {counts[main]} of "
                       f"{steps} rank-steps are communication bound, and {waiting / exposed:.0%} of their "
                       f"communication not overlapped with compute is waiting for rank {format_ids(slow)}.")
            main = "straggler"
    if unjudged:  # the judged ones' verdict, then how many it could not judge
        unknown = (f"{unjudged} of {len(report.steps)} rank-steps could not be judged: the input records "
                   "no device work in them, so whether they were host, device or communication bound is "
                   "unknown (not none).")
        summary = f"{summary} {unknown}" if steps else f"No rank-step could be judged. {unknown}"
    worst = max(by_kind[main], key=lambda d: d.share, default=None)
    look_at = None if worst is None else {"rank": worst.rank, "graph": worst.graph, "step": worst.step,
                                          "summary": worst.summary, "command": worst.command}
    found = {"dominant": main, "rank_steps": len(report.steps), "summary": summary, "look_at": look_at,
             "counts": {k: counts[k] for k in (*KINDS, "balanced", "unknown") if counts[k]},
             "time_share": {k: round(weight[k] / total, 4) for k in (*KINDS, "balanced") if weight[k]}
             if total else {},
             "what_if": [s.summary for s in report.critical]}
    return _with_pipeline(named_straggler(found, report), report)


def _with_pipeline(found: dict[str, Any], report: Report) -> dict[str, Any]:
    """The verdict with, where the job runs a pipeline, its finding (``pipelined.pipeline_finding``)
    said after it."""
    finding = pipeline_finding(report.pipeline)
    if finding is None:
        return found
    said = f"{found['summary']} {finding[0].upper()}{finding[1:]}"
    return found | {"summary": said, "pipeline": finding}


