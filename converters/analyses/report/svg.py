"""SVG drawn directly, for the report's plots: axes with ticks, bars, lines, markers, legends, colour
bars and heatmaps (a heatmap's cells as one small inline PNG, so thousands of ranks stay small).
Text stays text, laid out by the page's fonts; nothing is fetched. Sizes are in CSS pixels; widths
of text are estimated from its length (the page's sans-serif is about 0.55 em a character)."""

from __future__ import annotations

import base64
import html
import math
import struct
import zlib
from collections.abc import Sequence

FONT = 12  # px: the tick labels and legends; axis labels one larger
CHAR = 0.55  # a character's width in em (DejaVu Sans: 0.5-0.6), for the layout's margins

# ColorBrewer's sequential scales (9 classes), interpolated: the colour maps of the heatmaps
SCALES = {
    "YlOrRd": ("#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026",
               "#800026"),
    "Purples": ("#fcfbfd", "#efedf5", "#dadaeb", "#bcbddc", "#9e9ac8", "#807dba", "#6a51a3", "#54278f",
                "#3f007d"),
    "Blues": ("#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c",
              "#08306b"),
}
CYCLE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
         "#17becf")  # lines without a colour of their own, in turn


def e(text: object) -> str:
    return html.escape(str(text), quote=True)


def n(value: float) -> str:
    """A coordinate, to a tenth of a pixel."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def text_width(text: str, size: float = FONT) -> float:
    return len(text) * CHAR * size


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def scale_colour(scale: str, t: float) -> tuple[int, int, int]:
    """The colour at ``t`` (0-1) along a scale, interpolated between its classes."""
    anchors = SCALES[scale]
    t = min(1.0, max(0.0, t)) * (len(anchors) - 1)
    i = min(int(t), len(anchors) - 2)
    low, high = _rgb(anchors[i]), _rgb(anchors[i + 1])
    f = t - i
    return tuple(round(a + (b - a) * f) for a, b in zip(low, high, strict=True))  # type: ignore[return-value]


def png(pixels: Sequence[Sequence[tuple[int, int, int]]]) -> bytes:
    """An RGB PNG of rows of pixels (the first row on top)."""
    height, width = len(pixels), len(pixels[0])
    raw = b"".join(b"\x00" + bytes(c for p in row for c in p) for row in pixels)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round numbers (1, 2, 2.5 or 5 times a power of ten) from ``low`` to ``high``, about ``count``."""
    if not high > low:
        return [low]
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9)
    return [round(k * step, 12) for k in range(first, math.floor(high / step + 1e-9) + 1)]


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """A tick's number with as many decimals as the ticks' spacing needs (0.25: two, 5: none)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step)))
    if round(step * 10 ** decimals, 9) % 1:
        decimals += 1
    return f"{value + 0.0:,.{decimals}f}"  # + 0.0: no "-0"


def spaced(labels: Sequence[str], limit: int) -> list[int]:
    """The indexes of at most ``limit`` labels, evenly spaced from the first."""
    stride = max(1, -(-len(labels) // limit))
    return list(range(0, len(labels), stride))


class Figure:
    """One plot: a frame of ``width`` x ``height`` px, its axes within margins the caller sizes."""

    def __init__(self, ident: str, label: str, width: float, height: float) -> None:
        self.ident, self.label, self.width, self.height = ident, label, width, height
        self.parts: list[str] = []
        self.defs: list[str] = []

    def add(self, part: str) -> None:
        self.parts.append(part)

    def text(self, x: float, y: float, content: str, anchor: str = "start", size: float = FONT,
             colour: str = "#222", rotate: float = 0, baseline: str = "middle") -> None:
        turn = f' transform="rotate({n(rotate)} {n(x)} {n(y)})"' if rotate else ""
        self.add(f'<text x="{n(x)}" y="{n(y)}" font-size="{n(size)}" text-anchor="{anchor}" '
                 f'dominant-baseline="{baseline}" fill="{colour}"{turn}>{e(content)}</text>')

    def svg(self) -> str:
        defs = f"<defs>{''.join(self.defs)}</defs>" if self.defs else ""
        w, h = n(self.width), n(self.height)
        return (f'<svg role="img" aria-label="{e(self.label)}" class="plot" '
                f'xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
                f'font-family="DejaVu Sans, Arial, Helvetica, sans-serif"><title>{e(self.label)}</title>'
                f'{defs}{"".join(self.parts)}</svg>')


class Axes:
    """A plotting area at (``left``, ``top``) of ``width`` x ``height`` px within a figure, and the
    data's ranges it shows: ``x`` from left to right, ``y`` from bottom to top (or, ``y_down``, top
    to bottom, as rows of a grid and horizontal bars read)."""

    def __init__(self, fig: Figure, left: float, top: float, width: float, height: float,
                 xlim: tuple[float, float], ylim: tuple[float, float], y_down: bool = False) -> None:
        self.fig, self.left, self.top, self.width, self.height = fig, left, top, width, height
        self.xlim, self.ylim, self.y_down = xlim, ylim, y_down

    def x(self, value: float) -> float:
        low, high = self.xlim
        return self.left + (value - low) / ((high - low) or 1) * self.width

    def y(self, value: float) -> float:
        low, high = self.ylim
        share = (value - low) / ((high - low) or 1)
        return self.top + (share if self.y_down else 1 - share) * self.height

    def spines(self) -> None:
        bottom, right = self.top + self.height, self.left + self.width
        self.fig.add(f'<path d="M{n(self.left)} {n(self.top)}V{n(bottom)}H{n(right)}" fill="none" '
                     f'stroke="#333" stroke-width="0.8"/>')

    def xticks(self, ticks: Sequence[float], labels: Sequence[str], size: float = FONT) -> None:
        """Ticks and their labels under the axes; labels too wide for their room are turned."""
        bottom = self.top + self.height
        room = self.width / max(1, len(ticks))
        turned = max((text_width(s, size) for s in labels), default=0) > room * 0.95
        marks = "".join(f"M{n(self.x(t))} {n(bottom)}v4" for t in ticks)
        self.fig.add(f'<path d="{marks}" stroke="#333" stroke-width="0.8"/>')
        for t, label in zip(ticks, labels, strict=True):
            if turned:
                self.fig.text(self.x(t), bottom + 8, label, "end", size, rotate=-45, baseline="hanging")
            else:
                self.fig.text(self.x(t), bottom + 7, label, "middle", size, baseline="hanging")

    def yticks(self, ticks: Sequence[float], labels: Sequence[str], size: float = FONT) -> None:
        marks = "".join(f"M{n(self.left)} {n(self.y(t))}h-4" for t in ticks)
        self.fig.add(f'<path d="{marks}" stroke="#333" stroke-width="0.8"/>')
        for t, label in zip(ticks, labels, strict=True):
            self.fig.text(self.left - 7, self.y(t), label, "end", size)

    def xlabel(self, label: str, below: float) -> None:
        self.fig.text(self.left + self.width / 2, self.top + self.height + below, label, "middle", FONT + 1,
                      baseline="auto")

    def ylabel(self, label: str, left_of: float) -> None:
        x, y = self.left - left_of, self.top + self.height / 2
        self.fig.text(x, y, label, "middle", FONT + 1, rotate=-90, baseline="hanging")

    def image(self, pixels: Sequence[Sequence[tuple[int, int, int]]]) -> None:
        """Cells filling the axes, a pixel each, drawn as sharp squares."""
        data = base64.b64encode(png(pixels)).decode("ascii")
        self.fig.add(f'<image x="{n(self.left)}" y="{n(self.top)}" width="{n(self.width)}" '
                     f'height="{n(self.height)}" preserveAspectRatio="none" '
                     f'style="image-rendering:pixelated" '
                     f'href="data:image/png;base64,{data}"/>')


def numeric_axis(values: Sequence[float], zero: bool = True, count: int = 6) -> tuple[tuple[float, float],
                                                                                    list[float]]:
    """Limits and ticks of a numeric axis holding ``values`` (and 0 if ``zero``), a little margin
    beyond them as the data's edge is not the frame's."""
    low, high = min(values, default=0.0), max(values, default=1.0)
    if zero:
        low, high = min(low, 0.0), max(high, 0.0)
    if high <= low:
        low, high = (low - 1, high + 1) if low else (0.0, 1.0)
    pad = (high - low) * 0.05
    lim = (low if zero and low == 0 else low - pad, high if zero and high == 0 else high + pad)
    return lim, nice_ticks(*lim, count=count)


def legend(fig: Figure, x: float, y: float, entries: Sequence[tuple[str, str, str]], size: float = FONT - 1,
           anchor: str = "start") -> None:
    """Entries (label, colour, mark: ``box``, ``line``, ``dash`` or ``tick``) one under another from
    (``x``, ``y``); ``anchor="end"``: their right edge at ``x``."""
    if anchor == "end":
        x -= legend_width(entries, size)
    for i, (label, colour, mark) in enumerate(entries):
        middle = y + i * (size + 6) + size / 2
        if mark == "box":
            fig.add(f'<rect x="{n(x)}" y="{n(middle - 5)}" width="16" height="10" fill="{colour}" '
                    f'stroke="#999" stroke-width="0.5"/>')
        else:
            dash = ' stroke-dasharray="4 3"' if mark == "dash" else ""
            start, length = (x + 4, 8) if mark == "tick" else (x, 16)
            fig.add(f'<path d="M{n(start)} {n(middle)}h{length}" stroke="{colour}" '
                    f'stroke-width="1.6"{dash}/>')
        fig.text(x + 22, middle, label, "start", size)


def legend_width(entries: Sequence[tuple[str, str, str]], size: float = FONT - 1) -> float:
    return 24 + max((text_width(label, size) for label, _, _ in entries), default=0)


def colour_bar(fig: Figure, ident: str, left: float, top: float, height: float, scale: str,
               low: float, high: float, label: str) -> None:
    """A vertical bar of ``scale`` from ``low`` (bottom) to ``high``, its ticks and its label."""
    stops = "".join(f'<stop offset="{n(100 * i / (len(SCALES[scale]) - 1))}%" stop-color="{c}"/>'
                    for i, c in enumerate(SCALES[scale]))
    fig.defs.append(f'<linearGradient id="{ident}" x1="0" y1="1" x2="0" y2="0">{stops}</linearGradient>')
    fig.add(f'<rect x="{n(left)}" y="{n(top)}" width="14" height="{n(height)}" fill="url(#{ident})" '
            f'stroke="#999" stroke-width="0.5"/>')
    bar = Axes(fig, left + 14, top, 0, height, (0, 1), (low, high))
    ticks = nice_ticks(low, high, 5) if high > low else [low]
    marks = "".join(f"M{n(left + 14)} {n(bar.y(t))}h4" for t in ticks)
    fig.add(f'<path d="{marks}" stroke="#333" stroke-width="0.8"/>')
    for t in ticks:
        fig.text(left + 21, bar.y(t), tick_label(t, ticks), "start", FONT - 1)
    width = max((text_width(tick_label(t, ticks), FONT - 1) for t in ticks), default=0)
    fig.text(left + 26 + width, top + height / 2, label, "middle", FONT, rotate=-90, baseline="hanging")


COLOUR_BAR_WIDTH = 90  # px right of the axes: the bar, its numbers and its label
