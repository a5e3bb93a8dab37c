"""The report's page: one self-contained HTML file (inline CSS and SVG, no script, no network),
section by section, and writing the report as HTML or JSON."""

from __future__ import annotations

import html
import os
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from ...model import MEMORY_KINDS
from ...output import open_output
from ...select import format_ids
from ..memory import record as memory_record
from ..render import cell
from .baseline import TYPES_SHOWN
from .data import report_json
from .dataprep import DataStep, data_ops, data_steps
from .diagnosis import KIND_TITLES, KINDS
from .diagnosis import verdict as verdict_of
from .pipelined import HEADER, PipelineSection, pipeline_finding, table_rows
from .plots import (
    CHART_OPS,
    CRITICAL_COLOURS,
    KIND_COLOURS,
    LANE_COLOURS,
    PHASE_COLOURS,
    Plots,
    breakdown,
    critical_bars,
    delta_chart,
    diagnosis_grid,
    link_heatmap,
    memory_chart,
    op_types_chart,
    ops_chart,
    phase_series,
    queue_chart,
    stacked_bars,
    step_time_heatmap,
    wait_heatmap,
)
from .text import change, ms_text, short
from .types import NO_DEVICE_WORK, Diagnosis, OpTotal, Report, SlowStep

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
  margin: 0; color: #222; background: #fafafa; line-height: 1.45; }
main { max-width: 1180px; margin: 0 auto; padding: 12px 24px 48px; background: #fff; }
h1 { font-size: 1.5em; margin: 0.4em 0 0.2em; } h2 { font-size: 1.2em; margin-top: 1.8em;
  border-bottom: 1px solid #ddd; padding-bottom: 3px; } h3 { font-size: 1.02em; margin-bottom: 0.3em; }
nav { font-size: 0.9em; margin: 0.4em 0 1em; } nav a { margin-right: 1em; }
table { border-collapse: collapse; font-size: 0.86em; margin: 0.4em 0 0.8em; display: block; max-width: 100%;
  overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 2px 7px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fbfbfb; }
code, .cmd { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.92em; }
.cmd { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; user-select: all; }
.cmd span { white-space: nowrap; }
figure { margin: 0.6em 0 1.2em; } figcaption { font-size: 0.85em; color: #555; }
svg.plot { max-width: 100%; height: auto; display: block; }
.kind { display: inline-block; padding: 0 6px; border-radius: 3px; font-size: 0.85em; color: #fff; }
.verdict { font-size: 1.08em; padding: 8px 12px; border-left: 5px solid #888; background: #f6f6f6; }
.warn { color: #8a4b00; } .muted { color: #666; font-size: 0.88em; }
dl.job { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0.3em 0; }
dl.job dt { font-weight: 600; } dl.job dd { margin: 0; }
details { margin: 0.2em 0; } summary { cursor: pointer; }
"""

_NAV = [("job", "Job"), ("verdict", "Verdict"), ("step-time", "Step time"), ("breakdown", "Breakdown"),
        ("diagnosis", "Diagnosis"), ("critical", "Critical path"), ("pipeline", "Pipeline"),
        ("ranks", "Slow ranks"),
        ("links", "Links"), ("ops", "Top ops"), ("op-types", "Operator types"), ("method", "Method")]
ROWS_PER_KIND = 12  # findings listed per kind in the HTML (all of them are in --format json)


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _cmd(command: str) -> str:
    """A command to copy: it wraps between its words only, never inside a path or an option (a
    browser breaks lines after hyphens and slashes too, so each word is kept whole)."""
    words = " ".join(f"<span>{_e(word)}</span>" for word in command.split(" "))
    return f'<span class="cmd">{words}</span>'


def _kind_badge(kind: str) -> str:
    colour = KIND_COLOURS[kind]
    text_colour = "#222" if kind in ("host", "balanced", "unknown") else "#fff"
    style = f"background:{colour};color:{text_colour}"
    return f'<span class="kind" style="{style}">{_e(KIND_TITLES[kind])}</span>'


def _table(header: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{_e(c)}</td>' if i in numeric else f"<td>{c}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _num(ns: float | None, digits: int = 3) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.{digits}f}"


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{caption}</figcaption></figure>"


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat(timespec="milliseconds")


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def render_html(report: Report, command: str) -> str:
    """The report as one self-contained HTML page: inline CSS and SVG, no script, no network."""
    return _page(Plots(), report, command)


def _page(plots: Plots, report: Report, command: str) -> str:
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             f"<title>trace2perfetto report: {_e(Path(report.path).name or report.path)}</title>"
             f"<style>{_CSS}</style></head><body><main>"]
    parts.append(f"<h1>Where the time goes: {_e(Path(report.path).name or report.path)}</h1>")
    prepared = data_steps(report.steps)
    nav = _NAV[:-1] + [("data", "Data preparation")] + _NAV[-1:] if prepared else _NAV
    parts.append("<nav>" + "".join(f'<a href="#{i}">{t}</a>' for i, t in nav) + "</nav>")
    parts.append(_job_section(report, command))
    parts.append(_verdict_section(report))
    if report.steps:
        parts.append('<section id="step-time"><h2>Step time per rank</h2>')
        parts.append(_figure(step_time_heatmap(plots, report),
                             "Each cell one step of one rank; the colour its time (the step's bounds as "
                             "the profiler marks them). A column of one colour is a step the ranks share; "
                             "one dark cell, a rank that was slow in that step."))
        parts.append(_spread_table(report) + "</section>")
        parts.append(_breakdown_section(plots, report))
        parts.append(_diagnosis_section(plots, report))
        parts.append(_critical_section(plots, report.critical))
        parts.append(_pipeline_section(report.pipeline) if report.pipeline is not None else "")
    parts.append(_ranks_section(plots, report))
    parts.append(_links_section(plots, report))
    parts.append(_ops_section(plots, report))
    parts.append(_op_types_section(plots, report))
    if prepared:
        parts.append(_data_section(plots, report, prepared))
    parts.append(_memory_section(plots, report) if report.memory else "")
    parts.append(_baseline_section(plots, report) if report.baseline is not None else "")
    parts.append(_method_section(report))
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _job_section(report: Report, command: str) -> str:
    span = report.span_ns
    steps = sorted({f.step for f in report.steps if f.step is not None})
    job_steps = len({f.key for f in report.steps if f.key is not None})  # each graph's steps from 1
    graphs = sorted({f.graph for f in report.steps if f.graph is not None})
    formats = ", ".join(f"{name} (rank {format_ids(ranks)})" for name, ranks in report.formats.items())
    known = sorted({h for h in report.hosts.values() if h})
    if span is None:
        when = "-"
    elif report.wall_clock:
        when = f"{_iso(span[0])} to {_iso(span[1])} ({ms_text(span[1] - span[0])})"
    else:  # a relative clock is no date: its span only
        why = "times on the ranks' own clocks, not wall time" + (
            "; aligned by their collectives" if report.aligned else "" if len(report.ranks) < 2 else
            ", and not comparable across ranks")
        when = f"{ms_text(span[1] - span[0])} <span class=warn>({why})</span>"
    on_hosts = f" on {len(known)} host{'s' if len(known) > 1 else ''}" if known else ""
    items = [
        ("Profile", f"<code>{_e(report.path)}</code>"),
        ("Format", _e(formats)),
        ("Ranks", f"{len(report.ranks)}: {_e(format_ids(report.ranks))}" + on_hosts),
        ("Steps", (f"{job_steps}: {_e(format_ids(steps))}" if steps else "none marked (one pseudo step)")
         + (f"; graphs {_e(format_ids(graphs))}" if graphs else "") + f"; {len(report.steps)} rank-steps"),
        ("Time span", when),
        *([("Outside steps", _outside(report))] if report.outside else []),
        ("Input", _e(_bytes(report.input_bytes))),
        ("Made by", _cmd(command)),
    ]
    rows = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)
    warnings = "".join(f'<p class="warn">Warning: {_e(w)}</p>' for w in report.warnings)
    return f'<section id="job"><h2>Job</h2><dl class="job">{rows}</dl>{warnings}</section>'


def _outside(report: Report) -> str:
    """The activity outside any step, rank by rank: shown, never judged as a step."""
    spans = ", ".join(f"rank {f.rank}" + (f" graph {f.graph}" if f.graph is not None else "")
                      + f": {ms_text(f.step_ns)}" for f in report.outside)
    return (f"{_e(spans)} <span class=muted>(from the first to the last device work no step bounds: "
            "before the first step or after the last; not judged, and not in the step charts)</span>")


def _verdict_section(report: Report) -> str:
    verdict = verdict_of(report)
    main = verdict["dominant"]
    if not verdict["rank_steps"]:
        return '<section id="verdict"><h2>Verdict</h2><p>No steps to judge.</p></section>'
    text = _e(verdict["summary"])  # the border has the finding's colour
    worst = verdict["look_at"]
    if worst is not None:
        where = f"rank {worst['rank']}" + (f", step {worst['step']}" if worst["step"] is not None else "")
        text += (f"<br>Worst: {where}. {_e(worst['summary'])}<br>Open it on the timeline: "
                 + _cmd(worst["command"]))
    counts = ", ".join(f"{_kind_badge(k)} {n}" for k, n in verdict["counts"].items())
    what_if = "".join(f"<li>{_e(sentence)}</li>" for sentence in verdict["what_if"])
    if what_if:
        what_if = ('<p>What would save most in the slowest steps, recomputed on their critical paths '
                   f'(<a href="#critical">Critical path</a>):</p><ul>{what_if}</ul>')
    return (f'<section id="verdict"><h2>Verdict</h2><p class="verdict" style="border-color:'
            f'{KIND_COLOURS[main]}">{text}</p>{what_if}<p>Rank-steps by their dominant finding: {counts}.</p>'
            "</section>")


def _pipeline_section(section: PipelineSection) -> str:
    """The stages of the job's pipeline, each one's bubble beside the schedule's ideal."""
    finding = pipeline_finding(section)
    return (f'<section id="pipeline"><h2>Pipeline</h2><p>{_e(finding)}</p>'
            f"<p>Schedule: {_e(section.schedule)}; {section.stages} stages, {section.microbatches or '-'} "
            f"micro-batches; the ideal bubble (p-1)/(m+p-1). Micro-batches found by: "
            f"{_e(', '.join(f'{k} ({n} rank-steps)' for k, n in section.found_by.items()))}.</p>"
            + _table(HEADER, table_rows(section), {2, 3, 4, 5, 6, 7})
            + '<p class="muted">Bubble: the step\'s time on that rank minus the union of its '
            "micro-batches' "
            f"compute. Note: {_e(section.note)}.</p></section>")


def _spread_table(report: Report) -> str:
    spread = sorted((s for s in report.spread if s.ranks > 1), key=lambda s: -(s.max_ns - s.min_ns))[:8]
    if not spread:
        return ""
    several = len({s.graph for s in report.spread}) > 1  # named as the plots name them (plots._step_names)
    rows = [[_e("-" if s.step is None else f"g{s.graph} {s.step}" if several else s.step), s.ranks,
             _num(s.min_ns), _num(s.max_ns), _num(s.max_ns - s.min_ns), s.slowest_rank] for s in spread]
    return ("<h3>Steps with the widest spread across ranks</h3>"
            + _table(["Step", "Ranks", "Fastest (ms)", "Slowest (ms)", "Spread (ms)", "Slowest rank"], rows,
                     {1, 2, 3, 4, 5}))


def _breakdown_section(plots: Plots, report: Report) -> str:
    out = ['<section id="breakdown"><h2>Where the time goes</h2>']
    if any(f.has_device for f in report.steps):
        labels, lanes, slowest = breakdown(report, "step")
        chart = stacked_bars(plots, labels, lanes, LANE_COLOURS, "step", "Breakdown per step", slowest,
                             "slowest rank's step")
        out.append(_figure(chart,
                           "Per step, the mean over ranks: Preparing (host step start to the first device "
                           "work), Computing, Communication not overlapped with compute, Free (device idle "
                           "between its tasks) and Other (after the last device work until the step ends). "
                           "The black mark is the slowest rank's step time."))
        labels, lanes, slowest = breakdown(report, "rank")
        chart = stacked_bars(plots, labels, lanes, LANE_COLOURS, "rank", "Breakdown per rank", slowest,
                             "slowest step")
        out.append(_figure(chart, "Per rank, the mean over its steps (the black mark: its slowest step)."))
    else:
        out.append("<p>This input records no device tasks: Computing, Communication not overlapped and Free "
                   "are unknown (not zero).</p>")
    marked = phase_series(report)
    if marked:
        labels, series, listed = marked
        note = f" Also marked, overlapping these: {_e(', '.join(listed))} (in the JSON)." if listed else ""
        chart = stacked_bars(plots, labels, series, PHASE_COLOURS, "step", "Profiler phases per step")
        out.append(_figure(chart, "The phases the profiler marks in each step (mean over ranks); Not marked: "
                           "the rest of the step." + note))
    out.append("</section>")
    return "".join(out)


def _diagnosis_section(plots: Plots, report: Report) -> str:
    out = ['<section id="diagnosis"><h2>Diagnosis per rank and step</h2>',
           _figure(diagnosis_grid(plots, report),
                   "Each cell coloured by its dominant finding: a straggler first, else the bound with the "
                   "largest share of the step. Thresholds and how each is judged: see Method.")]
    by_kind: dict[str, list[Diagnosis]] = defaultdict(list)
    for d in report.diagnoses:
        by_kind[d.kind].append(d)
    graphs = any(d.graph is not None for d in report.diagnoses)
    if not by_kind:
        out.append("<p>No step of any rank passed a threshold.</p>")
    for kind in KINDS:
        found = sorted(by_kind.get(kind, []), key=lambda d: (-d.share, d.rank))
        if not found:
            continue
        rows = [[d.rank, *([d.graph] if graphs else []), "-" if d.step is None else d.step, f"{d.share:.0%}",
                 _e(d.summary), _cmd(d.command)] for d in found[:ROWS_PER_KIND]]
        more = (f'<p class="muted">and {len(found) - ROWS_PER_KIND} more (all in --format json)</p>'
                if len(found) > ROWS_PER_KIND else "")
        out.append(f"<h3>{_kind_badge(kind)} {len(found)} rank-step{'s' if len(found) > 1 else ''}</h3>"
                   + _table(["Rank", *(["Graph"] if graphs else []), "Step", "Share", "Evidence",
                             "Timeline of that rank and step"], rows, set(range(4 if graphs else 3))) + more)
    out.append("</section>")
    return "".join(out)


def _ranks_section(plots: Plots, report: Report) -> str:
    out = ['<section id="ranks"><h2>Slowest ranks and collectives</h2>']
    if len(report.ranks) < 2 or not report.collectives:
        out.append("<p>No collective was found on two ranks or more: there is nothing to compare across "
                   "ranks.</p></section>")
        return "".join(out)
    rows = [[r.rank, _e(report.hosts.get(r.rank) or "-"), r.steps, _num(r.wait_caused_ns),
             _num(r.wait_suffered_ns), r.last_arrivals, _num(r.mean_step_ns), _num(r.mean_computing_ns),
             _num(r.mean_communication_ns)]
            for r in report.slow_ranks[:16]]
    out.append(f"<p>{report.collectives} collectives matched across ranks"
               + (" (clocks aligned by the collectives' ends)" if report.aligned else "")
               + ". Ranks by the wait they caused the others (ms; wait caused and suffered, and last "
               "arrivals: totals over the kept steps; mean: per step):</p>")
    out.append(_table(["Rank", "Host", "Steps", "Wait caused", "Wait suffered", "Last arrivals", "Mean step",
                       "Mean computing", "Mean communication"], rows, {0, 2, 3, 4, 5, 6, 7, 8}))
    if len(report.slow_ranks) > 16:
        out.append(f'<p class="muted">and {len(report.slow_ranks) - 16} more ranks (in --format json)</p>')
    if report.wait_matrix:
        out.append(_figure(wait_heatmap(plots, report),
                           "Who waited for whom: row = the rank that waited, column = the rank that arrived "
                           "last at the collective, colour = the total wait over the kept steps."))
    if report.slowest_collectives:
        rows = [[_e(c.name), _e(c.group), "-" if c.step is None else c.step, c.occurrence, c.ranks,
                 _num(c.skew_ns), c.last_rank, _num(c.total_wait_ns)] for c in report.slowest_collectives]
        out.append("<h3>Collectives with the largest arrival skew</h3>"
                   + _table(["Collective", "Group", "Step", "#", "Ranks", "Skew (ms)", "Last rank",
                             "Total wait (ms)"], rows, {2, 3, 4, 5, 6, 7}))
    if report.clocks and len(report.clocks) > 1:
        rows = [[_e(c.host), _e(format_ids(c.ranks)), f"{c.offset_ns / 1000:+.3f}",
                 f"{c.spread_ns / 1000:.3f}", c.instances] for c in report.clocks]
        header = ["Host", "Ranks", "Offset (µs)", "Spread (µs)", "Collectives"]
        out.append("<h3>Host clocks</h3>" + _table(header, rows, {2, 3, 4}))
    out.append("</section>")
    return "".join(out)


def _critical_section(plots: Plots, steps: list[SlowStep]) -> str:
    """The slowest steps' critical paths: their time per rank and kind pictured, then each step's
    what-ifs (``trace2perfetto critical``'s figures)."""
    out = ['<section id="critical"><h2>Critical path</h2><p>For the slowest steps, the chain of work '
           "across ranks that set the step's time (device work in stream order, host launches, each "
           "collective from its last arrival), and what each change would save, recomputed on that "
           "chain's graph. <code>trace2perfetto critical</code> gives every step, every segment and "
           "every what-if.</p>"]
    if not steps:
        return "".join(out) + "<p>No step with a known time in this input.</p></section>"
    labels, series = critical_bars(steps)
    if labels:
        out.append(_figure(stacked_bars(plots, labels, series, CRITICAL_COLOURS, "step and rank",
                                        "Critical path per step and rank"),
                           "Per slowest step (its id) and each rank the path crosses (r), the path's time "
                           "there: compute, communication, wait (for another rank, in a collective), idle "
                           "(the device between its tasks), host (the device waiting for a launch)."))
    for s in steps:
        title = f"<h3>{_e(s.name.capitalize())}: {_e(ms_text(s.step_ns))} (rank {s.slowest_rank})</h3>"
        if s.found is None:
            why = ("No rank recorded device work in this step" if s.unknown == NO_DEVICE_WORK
                   else s.unknown[:1].upper() + s.unknown[1:])
            out.append(title + f"<p>{_e(why)}: its critical path is unknown.</p>")
            continue
        rows = [[w.rank if w.rank is not None else "all",
                 f'<span title="{_e(w.target)}">{_e(change(w, 90))}</span>', _num(w.saved_ns),
                 f"{w.saved_ns / s.found.step_ns:.2%}" if s.found.step_ns else "-"] for w in s.what_if]
        span = f"<p>The path spans {_e(ms_text(s.found.step_ns))} over the kept ranks.</p>"
        out.append(title + span + (_table(["Rank", "What if", "Saves (ms)", "Share of the path"], rows,
                                          {0, 2, 3}) if rows else "<p>No change on the path saves time.</p>"))
    out.append("</section>")
    return "".join(out)


def _profiler_links(links) -> str:
    """Which ranks' links are their profiler's own matrix (no plane tasks), in words; "" for none."""
    by_source: dict[str, list[int]] = {}
    for rank, source in links.from_profiler.items():
        by_source.setdefault(source, []).append(rank)
    return "".join(f" Rank {format_ids(ranks)}: no plane tasks; the profiler's own {_e(source)}, as written."
                   for source, ranks in by_source.items())


def _links_section(plots: Plots, report: Report) -> str:
    out = ['<section id="links"><h2>Links</h2>']
    links = report.links
    if links is None or not links.has_links:
        why = ("No communication ops in this input." if links is None else
               "No HCCL plane tasks on links in this input (Kineto, msprof or torch_npu without them): the "
               "link matrix needs them.")
        return "".join(out) + f"<p>{why}</p></section>"
    if any(s.transport != "LOCAL" for s in links.slowest):
        out.append(_figure(link_heatmap(plots, report),
                           "Each cell the transit from one rank (row) to another (column) over the kept "
                           "steps, coloured by its bandwidth (transit size / transit time, from the HCCL "
                           "plane tasks, as communication_matrix.json); copies within a rank (LOCAL) left "
                           "out." + _profiler_links(links)))
    rows = [[s.src, s.dst, _e(s.transport), f"{s.size_bytes / 1e6:,.1f}", _num(s.time_ns),
             f"{s.gb_per_s:g}", f"{s.median_gb_per_s:g}", "-" if s.ratio is None else f"{s.ratio:.2f}"]
            for s in links.slowest[:10]]
    out.append("<h3>Slowest links</h3><p>Bandwidth against the median of the job's links of the same "
               "transport (ratio 1: the median); <code>trace2perfetto comm --matrix</code> gives them per "
               "step and op.</p>")
    out.append(_table(["Src", "Dst", "Transport", "Size (MB)", "Time (ms)", "GB/s", "Median GB/s", "Ratio"],
                      rows, {0, 1, 3, 4, 5, 6, 7}))
    return "".join(out) + "</section>"


def _ops_rows(ops: list[OpTotal], base: int) -> list[list[Any]]:
    return [[f'<span title="{_e(o.name)}">{_e(short(o.name, 90))}</span>', o.count, _num(o.total_ns),
             _num(o.mean_ns, 4), f"{o.total_ns / base:.1%}" if base else "-"] for o in ops]


def _ops_section(plots: Plots, report: Report) -> str:
    out = ['<section id="ops"><h2>Top device ops</h2>']
    if not report.top_ops:
        out.append("<p>No device compute ops in this input.</p></section>")
        return "".join(out)
    listed, charted = len(report.top_ops), min(CHART_OPS, len(report.top_ops))
    where = "every kept rank and step" + (", and outside steps" if report.outside else "")
    out.append(_figure(ops_chart(plots, report), f"Device compute ops by total time over {where}: the "
                       + (f"top {charted} of the {listed} listed below." if charted < listed else
                          f"{_count(listed, 'op')} listed below.")))
    header = ["Op", "Count", "Total (ms)", "Mean (ms)", "Share of compute"]
    out.append(f"<h3>Over all ranks: the top {_count(listed, 'op')} by total time</h3>"
               + _table(header, _ops_rows(report.top_ops, report.compute_ns), {1, 2, 3, 4}))
    out.append("<h3>Per rank</h3>")
    for rank, ops in sorted(report.top_ops_by_rank.items()):
        if ops:
            base, shown = report.compute_ns_by_rank.get(rank, 0), ops[:RANK_OPS]
            out.append(f"<details><summary>Rank {rank}: {_num(base)} ms of compute; its top "
                       f"{_count(len(shown), 'op')}</summary>"
                       + _table(header, _ops_rows(shown, base), {1, 2, 3, 4}) + "</details>")
    out.append("</section>")
    return "".join(out)


RANK_OPS = 10  # ops listed per rank in the HTML (all of --top in the JSON)


def _data_section(plots: Plots, report: Report, steps: list[DataStep]) -> str:
    """MindData's data preparation: the queue per step (pictured), then the pipeline's operators."""
    out = ['<section id="data"><h2>Data preparation</h2>']
    queued = [s for s in steps if s.queue_empty is not None]
    if queued:
        empty = sum(1 for s in queued if s.queue_empty)
        out.append(_figure(queue_chart(plots, steps), f"The data queue at each step's start: empty in "
                           f"{empty} of {_count(len(queued), 'step')}. Empty, the step waited for its batch "
                           "(data loading bound); holding batches, the data was ready: where the queue is "
                           "recorded it decides the data-loading finding, not "
                           "<code>data_loading_share</code>."))
    rows = [[s.rank, "-" if s.step is None else s.step, _fig(s.queue_size), _fig(s.queue_capacity),
             _fig(s.machine_cpu), _fig(s.process_cpu)] for s in steps[:DATA_ROWS]]
    out.append(_table(["Rank", "Step", "Queue size", "Queue capacity", "Machine CPU (%)", "Process CPU (%)"],
                      rows, {2, 3, 4, 5}))
    ops = data_ops(report.steps)
    if ops:
        rows = [[o.rank, o.op_id, _e(o.op_type), _fig(o.workers), _fig(o.queue_capacity),
                 _fig(o.mean_queue_size), "-" if o.queue_usage is None else f"{o.queue_usage:.1%}",
                 _fig(o.mean_cpu)] for o in ops]
        out.append("<h3>Pipeline operators</h3>" + _table(
            ["Rank", "Op", "Type", "Workers", "Queue capacity", "Mean queue size", "Queue usage", "CPU (%)"],
            rows, {3, 4, 5, 6, 7}))
    out.append("</section>")
    return "".join(out)


DATA_ROWS = 200  # steps listed in the HTML (all of them are in --format json)


def _fig(value: float | None) -> str:
    return "-" if value is None else f"{value:,.4g}"


def _baseline_section(plots: Plots, report: Report) -> str:
    """What changed from the baseline run: the step phases pictured, then the op types that changed
    most (``trace2perfetto diff``'s figures and noise rule)."""
    found = report.baseline
    out = [f'<section id="baseline"><h2>Compared with the baseline</h2><p>Baseline (BASE): '
           f"<code>{_e(found.path)}</code>; this profile is NEW. A change is significant beyond the noise "
           "of both runs' steps (<code>trace2perfetto diff</code>: 3 robust standard deviations, at least "
           "5% of the mean).</p>"]
    if found.steps:
        out.append(_figure(delta_chart(plots, found.steps), "Each step phase's mean change: red slower, "
                           "green faster beyond the noise, grey within it."))

    def us(ns: float | None) -> str:
        return "-" if ns is None else f"{ns / 1000:,.1f}"

    def pct(row) -> str:
        return "-" if row.delta_pct is None else f"{row.delta_pct:+.1f}%"

    rows = [[_e(r.name), us(r.base.mean), us(r.new.mean), us(r.delta_mean), pct(r),
             "yes" if r.significant else "no"] for r in found.steps]
    out.append(_table(["Phase", "Base mean (µs)", "New mean (µs)", "Delta (µs)", "Delta", "Significant"],
                      rows, {1, 2, 3, 4}))
    types = [[_e(short(r.name, 60)), _e(r.kind), r.base.count, r.new.count, us(r.base.total), us(r.new.total),
              us(r.delta_total), pct(r), "yes" if r.significant else "no"] for r in found.types[:TYPES_SHOWN]]
    if types:
        out.append("<h3>Op types that changed most</h3>" + _table(
            ["Op type", "Kind", "Base count", "New count", "Base (µs)", "New (µs)", "Delta (µs)", "Delta",
             "Significant"], types, {2, 3, 4, 5, 6, 7}))
    out.append("</section>")
    return "".join(out)


def _memory_section(plots: Plots, report: Report) -> str:
    """Peak device memory per rank and component, and each rank's memory over time, peaks marked."""
    out = ['<section id="memory"><h2>Memory</h2><p>Device memory over the whole collection (the '
           "kept steps do not narrow it), per component as the profiler names it: PTA torch_npu's "
           "allocator, GE the graph engine's, PTA+GE their sum, APP the application as the driver "
           "sees it. <code>trace2perfetto memory</code> prints it; <code>--allocations</code> every "
           "allocation.</p>"]
    header = ["Rank", "Component", "Peak allocated (MB)", "Peak reserved (MB)", "Peak active (MB)",
              "Peak time", "Held at peak (MB)"]
    rows = [[r["Rank"], _e(r["Component"]), *(_e(cell(r[f"Peak {k}(MB)"])) for k in MEMORY_KINDS),
             _iso(row.peak_ns) if row.peak_ns is not None else "-", _e(cell(r["Held at Peak"]))]
            for row, r in ((row, memory_record(row)) for row in report.memory)]
    out.append(_table(header, rows, {2, 3, 4}))
    for rank in sorted({row.rank for row in report.memory}):
        out.append(_figure(memory_chart(plots, report, rank), f"Rank {rank}: each component's allocated "
                           "memory (reserved where it records no allocated) over time; ▼ its peak."))
    out.append("</section>")
    return "".join(out)


def _op_types_section(plots: Plots, report: Report) -> str:
    """Where each rank's device time goes by op type: ``trace2perfetto ops``' figures."""
    out = ['<section id="op-types"><h2>Operator types</h2>']
    if not report.op_types:
        out.append("<p>No device compute ops in this input.</p></section>")
        return "".join(out)
    shown = _count(len(report.op_types_shown), "type")
    out.append(_figure(op_types_chart(plots, report),
                       "Per rank, its device compute time (communication left out) by op type and core "
                       f"type, as <code>trace2perfetto ops</code> counts it: the {shown} with the most time "
                       "over the kept ranks, the rest stacked as Other types. Where a rank ran no device "
                       "work, Paddle's host operators (core type CPU) stand in."))
    total = sum(r.total_ns for r in report.op_types)

    def row(name: str, core: str, ranks: int, count: int, ns: int) -> list[Any]:
        return [f'<span title="{_e(name)}">{_e(short(name, 90))}</span>', _e(core), ranks, count, _num(ns),
                f"{ns / total:.1%}" if total else "-"]

    rows = []
    for name, core in report.op_types_shown:
        found = [o for r in report.op_types for o in r.shown if (o.name, o.core_type) == (name, core)]
        rows.append(row(name, core, len(found), sum(o.count for o in found), sum(o.total_ns for o in found)))
    rows.append(row("Other types", "", sum(1 for r in report.op_types if r.other_types),
                    sum(r.other_count for r in report.op_types), sum(r.other_ns for r in report.op_types)))
    out.append(_table(["Op type", "Core type", "Ranks", "Count", "Total (ms)", "Share"], rows, {2, 3, 4, 5})
               + '<p class="muted">Each type across the ranks, with its slowest rank: <code>trace2perfetto '
               "ops --across</code>.</p></section>")
    return "".join(out)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _method_section(report: Report) -> str:
    rows = [[f"<code>{_e(name)}</code>", f"{value:g}", _e(meaning)] for name, value, meaning in
            report.thresholds.items()]
    return ('<section id="method"><h2>Method</h2><p>Following Paddle\'s performance method: first the '
            "bottleneck (data loading, host, device, communication, or one slow rank), then the module, then "
            "the op. All shares are of the step time: the step's bounds as the profiler marks them "
            "(ProfilerStep, ProfileStep, the step trace), else its first to last device work. Computing, "
            "Communication and Free follow torch_npu's step_trace_time.csv (trace2perfetto overlap). Summary "
            "data holds no host threads, so <em>host bound</em> is judged from the device's side: the device "
            "idle, neither computing nor communicating, while the step lasts. The waits between ranks come "
            "from the collectives matched across ranks (trace2perfetto comm --slow-ranks).</p>"
            + _table(["Threshold", "Value", "A step is flagged when"], rows, {1})
            + '<p class="muted">Made by trace2perfetto; the same numbers: <code>--format json</code> '
            "(schemas/report.schema.json).</p></section>")


def write_html(report: Report, out_path: str | os.PathLike[str], command: str) -> int:
    """Write the HTML report to ``out_path`` ("-": stdout); it appears only when complete.
    Returns the bytes written."""
    return write_report(report, out_path, command, "html")


def write_report(report: Report, out_path: str | os.PathLike[str], command: str = "",
                 fmt: str = "html") -> int:
    """Write the report as ``fmt`` ("html", or "json": ``report_json``) to ``out_path`` ("-":
    stdout); it appears only when complete, and never over an input (``output.open_output``).
    ``command``: the command line that made it, printed on the page. Returns the bytes written."""
    if fmt == "json":
        data = orjson.dumps(report_json(report), option=orjson.OPT_INDENT_2) + b"\n"
    else:
        data = render_html(report, command).encode()
    with open_output(str(out_path), report.inputs) as out:
        out.write(data)
    return len(data)
