"""The report's plots: matplotlib figures as inline SVG. matplotlib (and numpy) are imported only
when a plot is drawn: ``trace2perfetto convert`` never loads them."""

from __future__ import annotations

import html
import io
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ...errors import UsageError
from ...model import StepKey
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


def _need_matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure
    except ImportError as e:  # a dependency of the package; say what to do if it went missing
        raise UsageError("the HTML report needs matplotlib (pip install matplotlib); "
                         "--format json works without it") from e
    return Figure


# Text stays text (the page's fonts draw it: small, selectable); images inline (no files beside)
_RC = {"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9, "axes.titlesize": 10,
       "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"], "svg.image_inline": True,
       "axes.spines.top": False, "axes.spines.right": False}


class Plots:
    """matplotlib figures to inline SVG, each with ids of its own (several share one page)."""

    def __init__(self) -> None:
        self.Figure = _need_matplotlib()
        self.count = 0

    def figure(self, width: float, height: float):
        return self.Figure(figsize=(width, height), layout="constrained")

    def svg(self, fig, label: str) -> str:
        import matplotlib

        self.count += 1
        prefix = f"f{self.count}-"
        buf = io.StringIO()
        with matplotlib.rc_context({"svg.hashsalt": prefix}):
            fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        text = buf.getvalue()
        text = text[text.index("<svg"):]
        text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m[1]}"', text)
        text = re.sub(r'url\(#([^)]+)\)', lambda m: f"url(#{prefix}{m[1]})", text)
        text = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m[1]}"', text)
        text = text.replace("<svg ", f'<svg role="img" aria-label="{html.escape(label)}" class="plot" ', 1)
        return text

    def styled(self):
        """The page's style (``_RC``) for the figures drawn inside it: ``with plots.styled():``."""
        import matplotlib

        return matplotlib.rc_context(_RC)


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


def _axis_labels(ax, axis: str, labels: list[str], limit: int | None = None) -> None:
    """At most ``limit`` labels (by default 25 across, 40 down), evenly spaced."""
    limit = limit or (25 if axis == "x" else 40)
    step = max(1, -(-len(labels) // limit))
    ticks = list(range(0, len(labels), step))
    if axis == "x":
        ax.set_xticks(ticks, [labels[i] for i in ticks])
    else:
        ax.set_yticks(ticks, [labels[i] for i in ticks])


def step_time_heatmap(plots: Plots, report: Report) -> str:
    """Step time per rank (row) and step (column)."""
    import matplotlib
    import numpy as np

    rows, cols, cells = _grid(report)
    data = np.full((len(rows), len(cols)), np.nan)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            if (f := cells.get((row, col))) is not None:
                data[i, j] = f.step_ns / 1e6
    fig = plots.figure(9.5, min(12.0, max(2.4, 0.16 * len(rows) + 1.3)))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["YlOrRd"].with_extremes(bad="#f4f4f4")  # bad: no such step on that rank
    image = ax.imshow(data, aspect="auto", interpolation="none", cmap=cmap, **_honest_scale(data))
    fig.colorbar(image, ax=ax, label="step time (ms)", shrink=0.9).solids.set_rasterized(True)
    _axis_labels(ax, "x", ["-" if c is None else str(c) for c in cols])
    _axis_labels(ax, "y", [_row_label(r) for r in rows])
    ax.set_xlabel("step")
    ax.set_ylabel("rank" + (" (g: graph)" if any(r[1] is not None for r in rows) else ""))
    ax.spines[:].set_visible(False)
    return plots.svg(fig, "Step time per rank and step")


def _honest_scale(data) -> dict[str, float]:
    """Colour limits at least 10% of the median wide: a spread of 1% does not look like 100%."""
    import numpy as np

    known = data[~np.isnan(data)]
    if not known.size:
        return {}
    low, high, middle = float(known.min()), float(known.max()), float(np.median(known))
    half = 0.05 * middle
    if high - low >= 2 * half:
        return {"vmin": low, "vmax": high}
    return {"vmin": max(0.0, min(low, middle - half)), "vmax": max(high, middle + half)}


def stacked_bars(plots: Plots, labels: list[str], series: dict[str, list[float]], colours: dict[str, str],
                 xlabel: str, title: str, line: list[float] | None = None, line_label: str = "") -> str:
    """Bars of ``series`` stacked per label, and ``line`` (if given) marked on each."""
    from matplotlib.collections import PolyCollection

    fig = plots.figure(9.5, 3.2)
    ax = fig.subplots()
    x = list(range(len(labels)))
    bottom = [0.0] * len(labels)
    half = 0.4 if len(labels) > 1 else 0.2
    handles = []
    for name, values in series.items():
        if any(values):  # one collection per series: a Rectangle per bar draws 2-4x slower
            bars = [[(i - half, b), (i + half, b), (i + half, b + v), (i - half, b + v)]
                    for i, b, v in zip(x, bottom, values, strict=True)]
            handles.append(ax.add_collection(PolyCollection(bars, facecolors=colours.get(name), linewidths=0,
                                                            label=name)))
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylim(0, max(max(bottom), max(line or [0])) * 1.05 or 1)
    handles.reverse()  # top to bottom, as stacked
    if line is not None:
        handles.insert(0, ax.plot(x, line, linestyle="none", marker="_", markersize=9, color="black",
                                  label=line_label)[0])
    _axis_labels(ax, "x", labels)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return plots.svg(fig, title)


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
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    rows, cols, cells = _grid(report)
    dominant = report.dominant()
    order = [*KINDS, "balanced", "unknown"]
    data = np.full((len(rows), len(cols)), order.index("unknown"))
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            if (f := cells.get((row, col))) is not None:
                data[i, j] = order.index(dominant[f.rank, f.graph, f.step])
    fig = plots.figure(9.5, min(12.0, max(2.4, 0.16 * len(rows) + 1.3)))
    ax = fig.subplots()
    ax.imshow(data, aspect="auto", interpolation="none", vmin=0, vmax=len(order) - 1,
              cmap=ListedColormap([KIND_COLOURS[k] for k in order]))
    _axis_labels(ax, "x", ["-" if c is None else str(c) for c in cols])
    _axis_labels(ax, "y", [_row_label(r) for r in rows])
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    present = sorted(set(data.flat), key=int)
    handles = [Patch(facecolor=KIND_COLOURS[order[i]], edgecolor="#999999", label=KIND_TITLES[order[i]])
               for i in present]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    return plots.svg(fig, "Diagnosis per rank and step")


def wait_heatmap(plots: Plots, report: Report) -> str:
    """Who waited for whom: the wait matrix over the kept steps."""
    import matplotlib
    import numpy as np

    ranks = report.ranks
    index = {r: i for i, r in enumerate(ranks)}
    data = np.zeros((len(ranks), len(ranks)))
    for rank, row in report.wait_matrix.items():
        for other, ns in row.items():
            data[index[rank], index[other]] = ns / 1e6
    side = min(7.5, max(3.2, 0.12 * len(ranks) + 2.4))
    fig = plots.figure(side + 1.2, side)
    ax = fig.subplots()
    cmap = matplotlib.colormaps["Purples"].with_extremes(bad="#f7f7f7")  # bad: no wait
    image = ax.imshow(np.where(data > 0, data, np.nan), interpolation="none", cmap=cmap, vmin=0)
    fig.colorbar(image, ax=ax, label="total wait (ms)", shrink=0.85).solids.set_rasterized(True)
    labels = [str(r) for r in ranks]
    _axis_labels(ax, "x", labels, 32)
    _axis_labels(ax, "y", labels, 32)
    ax.set_xlabel("rank waited for (arrived last)")
    ax.set_ylabel("rank that waited")
    ax.spines[:].set_visible(False)
    return plots.svg(fig, "Wait between ranks")


def link_heatmap(plots: Plots, report: Report) -> str:
    """The job's links between ranks (src x dst), coloured by bandwidth on the links' own range (a
    slow link is a pale cell in a row of dark ones), each cell labelled where there are few. LOCAL
    copies (within a rank, an order of magnitude faster) are left out."""
    import matplotlib
    import numpy as np

    links = [s for s in report.links.slowest if s.transport != "LOCAL"]
    sources = sorted({s.src for s in links})
    targets = sorted({s.dst for s in links})
    row, column = {r: i for i, r in enumerate(sources)}, {r: i for i, r in enumerate(targets)}
    data = np.full((len(sources), len(targets)), np.nan)
    for s in links:
        data[row[s.src], column[s.dst]] = s.gb_per_s
    fig = plots.figure(min(9.0, max(3.6, 0.3 * len(targets) + 2.4)),
                       min(7.5, max(2.4, 0.3 * len(sources) + 1.6)))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["Blues"].with_extremes(bad="#f7f7f7")  # bad: no such link
    low, high = float(np.nanmin(data)), float(np.nanmax(data))  # the links' range: a 5% slower link shows
    image = ax.imshow(data, interpolation="none", cmap=cmap, vmin=low, vmax=high if high > low else low + 1,
                      aspect="auto")
    if data.size <= 256:
        for (i, j), value in np.ndenumerate(data):
            if not np.isnan(value):
                dark = value > (low + high) / 2
                ax.text(j, i, f"{value:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "#222")
    fig.colorbar(image, ax=ax, label="bandwidth (GB/s)", shrink=0.85).solids.set_rasterized(True)
    _axis_labels(ax, "x", [str(r) for r in targets], 32)
    _axis_labels(ax, "y", [str(r) for r in sources], 32)
    ax.set_xlabel("dst rank")
    ax.set_ylabel("src rank")
    ax.spines[:].set_visible(False)
    return plots.svg(fig, "Bandwidth per link")


CHART_OPS = 15  # ops in the chart; the table under it lists all of --top


def ops_chart(plots: Plots, report: Report) -> str:
    """The top ``CHART_OPS`` device ops by total time."""
    ops = report.top_ops[:CHART_OPS][::-1]
    fig = plots.figure(9.5, 0.24 * len(ops) + 1.0)
    ax = fig.subplots()
    ax.barh(range(len(ops)), [o.total_ns / 1e6 for o in ops], color="#1a9641", height=0.7)
    ax.set_yticks(range(len(ops)), [short(o.name) for o in ops], fontsize=8)
    ax.set_xlabel("total time over the kept ranks and steps (ms)")
    return plots.svg(fig, "Top device ops by total time")



def queue_chart(plots: Plots, steps: list[DataStep]) -> str:
    """The data queue's size at each step's start, per rank, with its capacity: at 0 the step
    waited for its batch (``dataprep``)."""
    fig = plots.figure(9.5, 2.6)
    ax = fig.subplots()
    by_rank: dict[int, list[DataStep]] = defaultdict(list)
    for s in steps:
        if s.queue_size is not None and s.step is not None:
            by_rank[s.rank].append(s)
    for rank, mine in sorted(by_rank.items()):
        mine.sort(key=lambda s: s.step)
        ax.step([s.step for s in mine], [s.queue_size for s in mine], where="post", marker=".",
                label=f"rank {rank}")
    capacity = max((s.queue_capacity for s in steps if s.queue_capacity is not None), default=None)
    if capacity is not None:
        ax.axhline(capacity, color="#bdbdbd", linestyle="--", linewidth=1, label="capacity")
    ax.set_xlabel("step")
    ax.set_ylabel("batches in the queue")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize=8)
    return plots.svg(fig, "Data queue size at each step's start")


def memory_chart(plots: Plots, report: Report, rank: int) -> str:
    """One rank's device memory over time, a line per component (its Allocated, else Reserved), each
    peak marked and labelled."""
    fig = plots.figure(9.5, 3.0)
    ax = fig.subplots()
    peaks = {row.component: row for row in report.memory if row.rank == rank}
    starts = [p[0] for (r, _), points in report.memory_series.items() if r == rank for p in points]
    origin = min(starts, default=0)
    mine = [(component, points) for (r, component), points in sorted(report.memory_series.items())
            if r == rank and points]
    for index, (component, points) in enumerate(mine):
        line, = ax.step([(t - origin) / 1e6 for t, _ in points], [v / 2**20 for _, v in points],
                        where="post", linewidth=1.2, label=component)
        row = peaks.get(component)
        if row is not None and row.peak_ns is not None:
            value = max(v for _, v in points) / 2**20
            ax.plot([(row.peak_ns - origin) / 1e6], [value], "v", color=line.get_color(), markersize=6)
            ax.annotate(f"{value:,.1f}", ((row.peak_ns - origin) / 1e6, value), textcoords="offset points",
                        xytext=(0, 6 + 9 * (index % 2)), ha="center", fontsize=7)
    ax.set_xlabel("time since the rank's first memory record (ms)")
    ax.set_ylabel("MB")
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    return plots.svg(fig, f"Device memory of rank {rank} over time")


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
    fig = plots.figure(9.5, 0.5 + 0.42 * max(len(shown), 1))
    ax = fig.subplots()
    colours = ["#d62728" if r.significant and r.delta_pct > 0 else "#2ca02c" if r.significant else "#bdbdbd"
               for r in shown]
    ax.barh([r.name for r in shown], [r.delta_pct for r in shown], color=colours)
    ax.axvline(0, color="#555555", linewidth=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("change from the baseline (% of its mean per step)")
    return plots.svg(fig, "Step phases against the baseline")
