"""The report's plots as inline SVG, drawn by ``svg`` (axes, ticks, bars, lines, legends, heatmaps):
each figure's data, axes and labels, nothing fetched, no plotting library to import."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ...model import StepKey
from . import svg
from .dataprep import DataStep
from .diagnosis import KIND_TITLES, KINDS
from .text import short
from .types import Report, SlowStep, StepFacts

# Colours of the findings, and of the breakdown's lanes (the page's badges share them)
KIND_COLOURS = {"straggler": "#7b3294", "data_loading": "#2c7bb6", "communication": "#d7191c",
                "host": "#fdae61", "device": "#1a9641", "balanced": "#e0e0e0", "unknown": "#ffffff"}
LANE_COLOURS = {"Preparing": "#2c7bb6", "Computing": "#1a9641", "Communication (not overlapped)": "#d7191c",
                "Free": "#bdbdbd", "Other": "#fdae61"}

# The profiler's phases drawn stacked within a step, in this order; others (Reduce) are listed only
STACKED_PHASES = ("Iteration Interval", "Dataloader", "FP/BP", "Forward", "Backward", "Optimization",
                  "Tail")


class Plots:
    """The page's figures: each numbered, so the ids inside one (a colour bar's gradient) are its own."""

    def __init__(self) -> None:
        self.count = 0

    def figure(self, label: str, width_in: float, height_in: float) -> svg.Figure:
        """A figure of the size given in inches (96 px each), labelled for screen readers."""
        self.count += 1
        return svg.Figure(f"f{self.count}", label, width_in * PX, height_in * PX)


PX = 96  # px an inch: the figures' sizes are as matplotlib's were, in inches


def _frame(fig: svg.Figure, y_labels: list[str], x_labels: list[str], right: float, x_room: int,
           y_size: float = svg.FONT) -> svg.Axes:
    """Axes filling ``fig`` within margins for their tick labels (``x_room``: how many across), their
    axis labels and ``right`` px beside them (a legend, a colour bar); limits set by the caller."""
    left = 36 + max((svg.text_width(s, y_size) for s in y_labels), default=0)
    width = fig.width - left - right - 12
    widest = max((svg.text_width(s) for s in x_labels), default=0)
    turned = widest > width / max(1, x_room) * 0.95
    bottom = 48 + (widest * 0.71 if turned else 0)
    return svg.Axes(fig, left, 10, width, max(20.0, fig.height - 10 - bottom), (0, 1), (0, 1))


def _categories(ax: svg.Axes, axis: str, labels: list[str], limit: int, size: float = svg.FONT) -> None:
    """At most ``limit`` of ``labels``, evenly spaced, as ticks at their index."""
    shown = svg.spaced(labels, limit)
    (ax.xticks if axis == "x" else ax.yticks)(shown, [labels[i] for i in shown], size)


def _numbers(ax: svg.Axes, axis: str, ticks: list[float]) -> None:
    labels = [svg.tick_label(t, ticks) for t in ticks]
    (ax.xticks if axis == "x" else ax.yticks)(ticks, labels)


def _labels(ax: svg.Axes, xlabel: str, ylabel: str, y_labels: list[str], y_size: float = svg.FONT) -> None:
    turned = ax.fig.height - ax.top - ax.height > 60
    ax.xlabel(xlabel, ax.fig.height - ax.top - ax.height - 8 if turned else 40)
    ax.ylabel(ylabel, 28 + max((svg.text_width(s, y_size) for s in y_labels), default=0))


def _heatmap(plots: Plots, title: str, size: tuple[float, float], data: list[list[Any]],
             colour, x_labels: list[str], y_labels: list[str], limit: int, right: float) -> tuple[svg.Figure,
                                                                                               svg.Axes]:
    """A grid of cells (rows down, columns across), each ``colour(value)``, on labelled axes."""
    fig = plots.figure(title, *size)
    shown_x = [x_labels[i] for i in svg.spaced(x_labels, limit)]
    shown_y = [y_labels[i] for i in svg.spaced(y_labels, limit)]
    ax = _frame(fig, shown_y, shown_x, right, len(shown_x))
    ax.xlim, ax.ylim, ax.y_down = (-0.5, len(x_labels) - 0.5), (-0.5, len(y_labels) - 0.5), True
    ax.image([[colour(v) for v in row] for row in data])
    _categories(ax, "x", x_labels, limit)
    _categories(ax, "y", y_labels, limit)
    return fig, ax


def _scaled(scale: str, low: float, high: float, bad: str):
    """A cell's colour on ``scale`` from ``low`` to ``high``; ``bad``: where there is no value."""
    missing = svg._rgb(bad)
    span = high - low
    return lambda v: missing if v is None else svg.scale_colour(scale, (v - low) / span if span else 0.0)


def step_time_heatmap(plots: Plots, report: Report) -> str:
    """Step time per rank (row) and step (column)."""
    rows, cols, cells = _grid(report)
    data = [[None if (f := cells.get((row, col))) is None else f.step_ns / 1e6 for col in cols]
            for row in rows]
    low, high = _honest_scale([v for line in data for v in line if v is not None])
    size = (9.5, min(12.0, max(2.4, 0.16 * len(rows) + 1.3)))
    x_labels, y_labels = ["-" if c is None else str(c) for c in cols], [_row_label(r) for r in rows]
    fig, ax = _heatmap(plots, "Step time per rank and step", size, data,
                       _scaled("YlOrRd", low, high, "#f4f4f4"),  # no such step on that rank
                       x_labels, y_labels, 25, svg.COLOUR_BAR_WIDTH)
    _labels(ax, "step", "rank" + (" (g: graph)" if any(r[1] is not None for r in rows) else ""),
            [y_labels[i] for i in svg.spaced(y_labels, 25)])
    svg.colour_bar(fig, f"{fig.ident}-bar", ax.left + ax.width + 14, ax.top, ax.height, "YlOrRd", low, high,
                   "step time (ms)")
    return fig.svg()


def _honest_scale(known: list[float]) -> tuple[float, float]:
    """Colour limits at least 10% of the median wide: a spread of 1% does not look like 100%."""
    if not known:
        return 0.0, 1.0
    low, high, middle = min(known), max(known), statistics.median(known)
    half = 0.05 * middle
    if high - low >= 2 * half:
        return low, high
    return max(0.0, min(low, middle - half)), max(high, middle + half)


def _several_graphs(facts: Iterable[StepFacts]) -> bool:
    """Whether a rank has steps of more than one graph."""
    graphs: dict[int, set] = defaultdict(set)
    for f in facts:
        graphs[f.rank].add(f.graph)
    return any(len(g) > 1 for g in graphs.values())


def _step_names(facts: list[StepFacts]) -> dict[StepKey | None, str]:
    """Each step of the job as plots and tables name it: its id, and where the job has several
    graphs, the graph's id on the lowest rank that ran it (``g5 1``); ``-``: the pseudo step."""
    lowest: dict[StepKey | None, StepFacts] = {}
    for f in facts:
        if f.key not in lowest or f.rank < lowest[f.key].rank:
            lowest[f.key] = f
    several = len({k.graph for k in lowest if k is not None}) > 1
    return {k: "-" if k is None else f"g{f.graph} {k.step}" if several else str(k.step)
            for k, f in lowest.items()}


def _grid(report: Report) -> tuple[list[tuple[int, int | None]], list[Any], dict[tuple, StepFacts]]:
    """Rows (rank, or rank and graph where a rank has several), columns (steps) and the cells."""
    by_graph = _several_graphs(report.steps)
    rows = sorted({(f.rank, f.graph if by_graph else None) for f in report.steps},
                  key=lambda r: (r[0], -1 if r[1] is None else r[1]))
    cols = sorted({f.step for f in report.steps}, key=lambda s: -1 if s is None else s)
    cells = {((f.rank, f.graph if by_graph else None), f.step): f for f in report.steps}
    return rows, cols, cells


def _row_label(row: tuple[int, int | None]) -> str:
    return f"{row[0]}" if row[1] is None else f"{row[0]} g{row[1]}"


def stacked_bars(plots: Plots, labels: list[str], series: dict[str, list[float]], colours: dict[str, str],
                 xlabel: str, title: str, line: list[float] | None = None, line_label: str = "") -> str:
    """Bars of ``series`` stacked per label, and ``line`` (if given) marked on each."""
    drawn = {name: values for name, values in series.items() if any(values)}
    entries = [(name, colours.get(name, "#777777"), "box") for name in reversed(drawn)]  # top to bottom
    if line is not None:
        entries.insert(0, (line_label, "#000000", "tick"))
    fig = plots.figure(title, 9.5, 3.2)
    tops = [sum(values) for values in zip(*drawn.values(), strict=True)] or [0.0]
    high = max(max(tops), max(line or [0])) * 1.05 or 1
    ticks = svg.nice_ticks(0, high)
    tick_text = [svg.tick_label(t, ticks) for t in ticks]
    shown = [labels[i] for i in svg.spaced(labels, 25)]
    ax = _frame(fig, tick_text, shown, svg.legend_width(entries) + 16, len(shown))
    ax.xlim, ax.ylim = (-0.6, len(labels) - 0.4), (0, high)
    half = 0.4 if len(labels) > 1 else 0.2
    bottom = [0.0] * len(labels)
    for name, values in drawn.items():
        bars = [f'<rect x="{svg.n(ax.x(i - half))}" y="{svg.n(ax.y(b + v))}" '
                f'width="{svg.n(ax.x(i + half) - ax.x(i - half))}" height="{svg.n(ax.y(b) - ax.y(b + v))}">'
                f'<title>{svg.e(labels[i])}: {svg.e(name)} {v:.3g} ms</title></rect>'
                for i, (b, v) in enumerate(zip(bottom, values, strict=True)) if v > 0]
        fig.add(f'<g class="bars" fill="{colours.get(name, "#777777")}" data-series="{svg.e(name)}">'
                f'{"".join(bars)}</g>')
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    if line is not None:
        marks = "".join(f"M{svg.n(ax.x(i) - 6)} {svg.n(ax.y(v))}h12" for i, v in enumerate(line))
        fig.add(f'<path class="marks" d="{marks}" stroke="#000" stroke-width="1.5"/>')
    ax.spines()
    _categories(ax, "x", labels, 25)
    ax.yticks(ticks, tick_text)
    _labels(ax, xlabel, "ms", tick_text)
    svg.legend(fig, ax.left + ax.width + 12, ax.top, entries)
    return fig.svg()


def _mean(values: Iterable[float | None]) -> float:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else 0.0


def breakdown(report: Report, by: str) -> tuple[list[str], dict[str, list[float]], list[float]]:
    """Mean over ranks per step (``by="step"``) or over steps per rank: ms per lane, and the
    slowest step time of each bar."""
    keyed: dict[Any, list[StepFacts]] = defaultdict(list)
    for f in report.steps:
        keyed[f.key if by == "step" else f.rank].append(f)
    keys = sorted(keyed, key=lambda k: () if k is None else k)  # steps (the pseudo step first), or ranks
    lanes: dict[str, list[float]] = {name: [] for name in LANE_COLOURS}
    for k in keys:
        mine = [f for f in keyed[k] if f.has_device]
        lanes["Preparing"].append(_mean(f.overlap.preparing_ns for f in mine) / 1e6)
        lanes["Computing"].append(_mean(f.overlap.computing_ns for f in mine) / 1e6)
        lanes["Communication (not overlapped)"].append(_mean(f.overlap.not_overlapped_ns for f in mine) / 1e6)
        lanes["Free"].append(_mean(f.overlap.free_ns for f in mine) / 1e6)
        lanes["Other"].append(_mean(f.other_ns for f in mine) / 1e6)
    slowest = [max(f.step_ns for f in keyed[k]) / 1e6 for k in keys]
    names = _step_names(report.steps) if by == "step" else {k: str(k) for k in keys}
    return [names[k] for k in keys], lanes, slowest


def phase_series(report: Report) -> tuple[list[str], dict[str, list[float]], list[str]] | None:
    """Per step, the mean over ranks of each stacked phase and of the rest (Not marked); and the
    phases listed only. None: the profiler marks no phases."""
    names = {name for f in report.steps for name in f.phases}
    if not names:
        return None
    stacked = [n for n in STACKED_PHASES if n in names]
    keyed: dict[StepKey | None, list[StepFacts]] = defaultdict(list)
    for f in report.steps:
        keyed[f.key].append(f)
    keys = sorted(keyed, key=lambda k: () if k is None else k)
    series: dict[str, list[float]] = {n: [] for n in (*stacked, "Not marked")}
    for k in keys:
        mine = keyed[k]
        for n in stacked:
            series[n].append(_mean(f.phases.get(n, 0) for f in mine) / 1e6)
        series["Not marked"].append(_mean(max(0, f.step_ns - sum(f.phases.get(n, 0) for n in stacked))
                                          for f in mine) / 1e6)
    labels = _step_names(report.steps)
    return [labels[k] for k in keys], series, sorted(names - set(stacked))


PHASE_COLOURS = {"Iteration Interval": "#2c7bb6", "Dataloader": "#2c7bb6", "FP/BP": "#1a9641",
                 "Forward": "#1a9641", "Backward": "#a6d96a", "Optimization": "#fdae61", "Tail": "#d7191c",
                 "Not marked": "#d0d0d0"}


# The critical path's kinds (``analyses.critical.KINDS``), coloured as the breakdown's lanes
CRITICAL_COLOURS = {"compute": "#1a9641", "communication": "#d7191c", "wait": "#7b3294",
                    "communication_or_wait": "#c2a5cf", "idle": "#bdbdbd", "host": "#fdae61"}


def critical_bars(steps: list[SlowStep]) -> tuple[list[str], dict[str, list[float]]]:
    """One bar per slowest step and rank its critical path crosses ("52 r1"): the path's time on
    that rank by kind (ms); steps whose path is unknown have none."""
    labels: list[str] = []
    series: dict[str, list[float]] = {kind: [] for kind in CRITICAL_COLOURS}
    for s in steps:
        found = s.by_rank_and_kind()
        for rank in sorted({rank for rank, _ in found}):
            labels.append(f"{'-' if s.step is None else s.step} r{rank}")
            for kind, values in series.items():
                values.append(found.get((rank, kind), 0) / 1e6)
    return labels, series


def diagnosis_grid(plots: Plots, report: Report) -> str:
    """Each rank and step coloured by its dominant finding (``Report.dominant``)."""
    rows, cols, cells = _grid(report)
    dominant = report.dominant()
    order = [*KINDS, "balanced", "unknown"]
    data = [["unknown" if (f := cells.get((row, col))) is None else dominant[f.rank, f.graph, f.step]
             for col in cols] for row in rows]
    present = sorted({kind for line in data for kind in line}, key=order.index)
    entries = [(KIND_TITLES[kind], KIND_COLOURS[kind], "box") for kind in present]
    x_labels, y_labels = ["-" if c is None else str(c) for c in cols], [_row_label(r) for r in rows]
    size = (9.5, min(12.0, max(2.4, 0.16 * len(rows) + 1.3)))
    fig, ax = _heatmap(plots, "Diagnosis per rank and step", size, data, lambda k: svg._rgb(KIND_COLOURS[k]),
                       x_labels, y_labels, 25, svg.legend_width(entries) + 16)
    ax.spines()
    _labels(ax, "step", "rank", [y_labels[i] for i in svg.spaced(y_labels, 25)])
    svg.legend(fig, ax.left + ax.width + 12, ax.top, entries)
    return fig.svg()


def wait_heatmap(plots: Plots, report: Report) -> str:
    """Who waited for whom: the wait matrix over the kept steps."""
    ranks = report.ranks
    index = {r: i for i, r in enumerate(ranks)}
    data: list[list[float | None]] = [[None] * len(ranks) for _ in ranks]  # None: no wait
    for rank, row in report.wait_matrix.items():
        for other, ns in row.items():
            if ns > 0:
                data[index[rank]][index[other]] = ns / 1e6
    high = max((v for line in data for v in line if v is not None), default=1.0)
    side = min(7.5, max(3.2, 0.12 * len(ranks) + 2.4))
    labels = [str(r) for r in ranks]
    fig, ax = _heatmap(plots, "Wait between ranks", (side + 1.2, side), data,
                       _scaled("Purples", 0.0, high, "#f7f7f7"), labels, labels, 32, svg.COLOUR_BAR_WIDTH)
    _labels(ax, "rank waited for (arrived last)", "rank that waited",
            [labels[i] for i in svg.spaced(labels, 32)])
    svg.colour_bar(fig, f"{fig.ident}-bar", ax.left + ax.width + 14, ax.top, ax.height, "Purples", 0.0, high,
                   "total wait (ms)")
    return fig.svg()


def link_heatmap(plots: Plots, report: Report) -> str:
    """The job's links between ranks (src x dst), coloured by bandwidth on the links' own range (a
    slow link is a pale cell in a row of dark ones), each cell labelled where there are few. LOCAL
    copies (within a rank, an order of magnitude faster) are left out."""
    links = [s for s in report.links.slowest if s.transport != "LOCAL"]
    sources = sorted({s.src for s in links})
    targets = sorted({s.dst for s in links})
    row, column = {r: i for i, r in enumerate(sources)}, {r: i for i, r in enumerate(targets)}
    data: list[list[float | None]] = [[None] * len(targets) for _ in sources]  # None: no such link
    for s in links:
        data[row[s.src]][column[s.dst]] = s.gb_per_s
    known = [v for line in data for v in line if v is not None]
    low, high = min(known), max(known)  # the links' range: a 5% slower link shows
    high = high if high > low else low + 1
    size = (min(9.0, max(3.6, 0.3 * len(targets) + 2.4)), min(7.5, max(2.4, 0.3 * len(sources) + 1.6)))
    x_labels, y_labels = [str(r) for r in targets], [str(r) for r in sources]
    fig, ax = _heatmap(plots, "Bandwidth per link", size, data, _scaled("Blues", low, high, "#f7f7f7"),
                       x_labels, y_labels, 32, svg.COLOUR_BAR_WIDTH)
    if len(sources) * len(targets) <= 256:
        for i, line in enumerate(data):
            for j, value in enumerate(line):
                if value is not None:
                    fig.text(ax.x(j), ax.y(i), f"{value:.3g}", "middle", 10,
                             "#ffffff" if value > (low + high) / 2 else "#222222")
    _labels(ax, "dst rank", "src rank", [y_labels[i] for i in svg.spaced(y_labels, 32)])
    svg.colour_bar(fig, f"{fig.ident}-bar", ax.left + ax.width + 14, ax.top, ax.height, "Blues", low, high,
                   "bandwidth (GB/s)")
    return fig.svg()


CHART_OPS = 15  # ops in the chart; the table under it lists all of --top


def _horizontal_bars(plots: Plots, title: str, height_in: float, names: list[str], values: list[float],
                     colours: list[str], xlabel: str, zero_line: bool = False,
                     full: list[str] | None = None) -> str:
    """A bar per name, the first on top, its length ``values`` (ms or %) from 0; ``full``: the names
    the bars' tooltips give (where the axis shows them cut)."""
    fig = plots.figure(title, 9.5, height_in)
    xlim, ticks = svg.numeric_axis(values)
    ax = _frame(fig, names, [svg.tick_label(t, ticks) for t in ticks], 12, len(ticks), 11)
    ax.xlim, ax.ylim, ax.y_down = xlim, (-0.5, len(names) - 0.5), True
    bars = "".join(f'<rect x="{svg.n(min(ax.x(0), ax.x(v)))}" y="{svg.n(ax.y(i - 0.35))}" '
                   f'width="{svg.n(abs(ax.x(v) - ax.x(0)))}" '
                   f'height="{svg.n(ax.y(i + 0.35) - ax.y(i - 0.35))}" '
                   f'fill="{colour}"><title>{svg.e(name)}: {v:.4g}</title></rect>'
                   for i, (name, v, colour) in enumerate(zip(full or names, values, colours, strict=True)))
    fig.add(f'<g class="bars">{bars}</g>')
    if zero_line:
        fig.add(f'<path d="M{svg.n(ax.x(0))} {svg.n(ax.top)}v{svg.n(ax.height)}" stroke="#555" '
                f'stroke-width="0.8"/>')
    ax.spines()
    ax.yticks(list(range(len(names))), names, 11)
    _numbers(ax, "x", ticks)
    ax.xlabel(xlabel, 40)
    return fig.svg()


def ops_chart(plots: Plots, report: Report) -> str:
    """The top ``CHART_OPS`` device ops by total time."""
    ops = report.top_ops[:CHART_OPS]
    return _horizontal_bars(plots, "Top device ops by total time", 0.24 * len(ops) + 1.0,
                            [short(o.name) for o in ops], [o.total_ns / 1e6 for o in ops],
                            ["#1a9641"] * len(ops), "total time over the kept ranks and steps (ms)",
                            full=[o.name for o in ops])


def _steps_line(ax: svg.Axes, points: list[tuple[float, float]], colour: str, width: float = 1.2,
                dots: bool = False, label: str = "") -> str:
    """A line holding each value until the next point (a step plot, ``where="post"``)."""
    path = f"M{svg.n(ax.x(points[0][0]))} {svg.n(ax.y(points[0][1]))}" + "".join(
        f"H{svg.n(ax.x(x))}V{svg.n(ax.y(y))}" for x, y in points[1:])
    out = (f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="{width}">'
           f'<title>{svg.e(label)}</title></path>')
    if dots:
        out += "".join(f'<circle cx="{svg.n(ax.x(x))}" cy="{svg.n(ax.y(y))}" r="2.2" fill="{colour}"/>'
                       for x, y in points)
    return out


def _numeric_frame(plots: Plots, title: str, height_in: float, xs: list[float], ys: list[float],
                   x_zero: bool, y_headroom: float = 1.0) -> tuple[svg.Figure, svg.Axes, list[float],
                                                                   list[float]]:
    """A figure whose axes are numbers both ways (y from 0)."""
    fig = plots.figure(title, 9.5, height_in)
    xlim, x_ticks = svg.numeric_axis(xs, zero=x_zero, count=8)
    (_, top), y_ticks = svg.numeric_axis([max(ys, default=1.0) * y_headroom], count=5)
    y_text = [svg.tick_label(t, y_ticks) for t in y_ticks]
    ax = _frame(fig, y_text, [svg.tick_label(t, x_ticks) for t in x_ticks], 12, len(x_ticks))
    ax.xlim, ax.ylim = xlim, (0.0, top)
    ax.spines()
    _numbers(ax, "x", x_ticks)
    ax.yticks(y_ticks, y_text)
    return fig, ax, x_ticks, y_ticks


def queue_chart(plots: Plots, steps: list[DataStep]) -> str:
    """The data queue's size at each step's start, per rank, with its capacity: at 0 the step
    waited for its batch (``dataprep``)."""
    by_rank: dict[int, list[DataStep]] = defaultdict(list)
    for s in steps:
        if s.queue_size is not None and s.step is not None:
            by_rank[s.rank].append(s)
    capacity = max((s.queue_capacity for s in steps if s.queue_capacity is not None), default=None)
    xs = [float(s.step) for mine in by_rank.values() for s in mine]
    ys = [float(s.queue_size) for mine in by_rank.values() for s in mine] + ([capacity] if capacity else [])
    fig, ax, _, y_ticks = _numeric_frame(plots, "Data queue size at each step's start", 2.6, xs, ys, False)
    entries = []
    for (rank, mine), colour in zip(sorted(by_rank.items()), itertools.cycle(svg.CYCLE)):
        mine.sort(key=lambda s: s.step)
        fig.add(_steps_line(ax, [(s.step, s.queue_size) for s in mine], colour, dots=True,
                            label=f"rank {rank}"))
        entries.append((f"rank {rank}", colour, "line"))
    if capacity is not None:
        fig.add(f'<path d="M{svg.n(ax.left)} {svg.n(ax.y(capacity))}h{svg.n(ax.width)}" stroke="#bdbdbd" '
                f'stroke-dasharray="4 3" stroke-width="1"/>')
        entries.append(("capacity", "#bdbdbd", "dash"))
    _labels(ax, "step", "batches in the queue", [svg.tick_label(t, y_ticks) for t in y_ticks])
    svg.legend(fig, ax.left + ax.width - 6, ax.top + 4, entries, anchor="end")
    return fig.svg()


def memory_chart(plots: Plots, report: Report, rank: int) -> str:
    """One rank's device memory over time, a line per component (its Allocated, else Reserved), each
    peak marked and labelled."""
    peaks = {row.component: row for row in report.memory if row.rank == rank}
    starts = [p[0] for (r, _), points in report.memory_series.items() if r == rank for p in points]
    origin = min(starts, default=0)
    mine = [(component, [((t - origin) / 1e6, v / 2**20) for t, v in points])
            for (r, component), points in sorted(report.memory_series.items()) if r == rank and points]
    xs = [x for _, points in mine for x, _ in points]
    ys = [y for _, points in mine for _, y in points]
    fig, ax, _, y_ticks = _numeric_frame(plots, f"Device memory of rank {rank} over time", 3.0, xs, ys, True,
                                         1.15)  # room above each peak for its label
    entries = []
    for index, ((component, points), colour) in enumerate(zip(mine, itertools.cycle(svg.CYCLE))):
        fig.add(_steps_line(ax, points, colour, label=component))
        entries.append((component, colour, "line"))
        row = peaks.get(component)
        if row is not None and row.peak_ns is not None:
            x, y = ax.x((row.peak_ns - origin) / 1e6), ax.y(max(v for _, v in points))
            fig.add(f'<path d="M{svg.n(x - 4)} {svg.n(y - 7)}h8l-4 7z" fill="{colour}"/>')  # ▼ on the peak
            fig.text(x, y - 10 - 12 * (index % 2), f"{max(v for _, v in points):,.1f}", "middle", 10,
                     baseline="auto")
    _labels(ax, "time since the rank's first memory record (ms)", "MB",
            [svg.tick_label(t, y_ticks) for t in y_ticks])
    svg.legend(fig, ax.left + 10, ax.top + 4, entries, 10)
    return fig.svg()


OP_TYPE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22")
OTHER_TYPES = "Other types"


def op_types_chart(plots: Plots, report: Report) -> str:
    """Per rank, its device op time in each of the job's top op types, the rest stacked on top."""
    labels = [str(r.rank) for r in report.op_types]
    series: dict[str, list[float]] = {}
    colours = {OTHER_TYPES: "#d0d0d0"}
    for (name, core), colour in zip(report.op_types_shown, OP_TYPE_COLOURS, strict=False):
        label = f"{short(name, 40)} ({core})"
        label += f" #{len(series) + 1}" if label in series else ""  # names alike in their start and end
        colours[label] = colour
        series[label] = [next((o.total_ns for o in r.shown if (o.name, o.core_type) == (name, core)), 0) / 1e6
                         for r in report.op_types]
    series[OTHER_TYPES] = [r.other_ns / 1e6 for r in report.op_types]
    return stacked_bars(plots, labels, series, colours, "rank", "Device op time per rank by op type")


def delta_chart(plots: Plots, rows: list) -> str:
    """Each step phase's change from the baseline, in % of the baseline's mean (``diff`` rows):
    red where slower beyond the noise, green where faster beyond it, grey within it."""
    shown = [r for r in rows if r.delta_pct is not None]
    colours = ["#d62728" if r.significant and r.delta_pct > 0 else "#2ca02c" if r.significant else "#bdbdbd"
               for r in shown]
    return _horizontal_bars(plots, "Step phases against the baseline", 0.5 + 0.42 * max(len(shown), 1),
                            [r.name for r in shown], [r.delta_pct for r in shown], colours,
                            "change from the baseline (% of its mean per step)", zero_line=True)
