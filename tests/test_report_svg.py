"""The report's plots are SVG of the project's own (``analyses/report/svg.py``): each figure parses
as XML, is labelled for screen readers, fetches nothing, and holds the data: a bar per step, the
steps and ranks as tick labels, a heatmap cell per rank and step, the straggler's row in its colour.
The expectations come from the generator's truth and the report's JSON, not from the plotting code;
the heatmaps' PNGs are decoded here with zlib alone."""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import subprocess
import sys
import zlib
from xml.etree import ElementTree

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from converters.analyses.report import svg
from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile

NS = "{http://www.w3.org/2000/svg}"
RANKS, STEPS, SLOW_RANK = 6, 4, 3
STRAGGLER = (0x7B, 0x32, 0x94)  # the findings' colour of a straggler, as the page's badges show it


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A job whose slow rank is known: its page's figures by label, its JSON and its truth."""
    root = tmp_path_factory.mktemp("svg") / "job"
    truth = write_ascend_pt_profile(root, ranks=RANKS, steps=STEPS, tasks_per_step=30, ranks_per_host=3,
                                    slow_rank=SLOW_RANK, slow_ns=2_000_000, seed=7)
    page, document = root.parent / "job.html", root.parent / "job.json"
    assert main(["report", str(root), "-o", str(page), "-q"]) == 0
    assert main(["report", str(root), "--format", "json", "-o", str(document), "-q"]) == 0
    figures = {}
    for text in re.findall(r"<svg\b.*?</svg>", page.read_text(), flags=re.S):
        element = ElementTree.fromstring(text)  # well formed, or this raises
        figures[element.get("aria-label")] = element
    return figures, json.loads(document.read_text()), truth


def _texts(element) -> list[str]:
    return [t.text for t in element.iter(f"{NS}text")]


def _series(element) -> dict[str, list]:
    """The bars of each series of a bar chart, by the series' name."""
    return {g.get("data-series"): g.findall(f"{NS}rect") for g in element.iter(f"{NS}g")
            if g.get("data-series")}


def _png(element) -> list[list[tuple[int, int, int]]]:
    """The rows of RGB pixels of a figure's one inline PNG (8-bit RGB, filter 0 on every row)."""
    (image,) = element.iter(f"{NS}image")
    data = base64.b64decode(image.get("href").removeprefix("data:image/png;base64,"))
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(data):
        length, tag = struct.unpack(">I4s", data[at:at + 8])
        chunks[tag] = data[at + 8:at + 8 + length]
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + 3 * width
    rows = [raw[i * stride:(i + 1) * stride] for i in range(height)]
    assert all(r[0] == 0 for r in rows)
    return [[tuple(r[1 + 3 * j:4 + 3 * j]) for j in range(width)] for r in rows]


def test_every_figure_is_well_formed_labelled_and_fetches_nothing(job):
    figures, _, _ = job
    assert len(figures) == 9
    for label, element in figures.items():
        assert element.tag == f"{NS}svg" and element.get("role") == "img" and label
        assert element.find(f"{NS}title").text == label
        assert float(element.get("width")) > 300 and float(element.get("height")) > 100
        for node in element.iter():
            for name, value in node.attrib.items():
                if name.endswith("href"):
                    assert value.startswith(("data:image/png;base64,", "#")), (label, value)
                assert "url(" not in value or value.startswith("url(#"), (label, value)
        assert all(t and t.strip() for t in _texts(element)), label  # no empty labels


def test_the_breakdown_per_step_has_a_bar_per_step_and_lane(job):
    figures, document, truth = job
    chart = figures["Breakdown per step"]
    steps = sorted({c.step for c in truth.collectives})
    assert len(steps) == STEPS
    for name in ("Preparing", "Computing", "Communication (not overlapped)", "Free"):
        bars = _series(chart)[name]
        assert len(bars) == STEPS, name
        assert [b.find(f"{NS}title").text.split(":")[0] for b in bars] == [str(s) for s in steps]
    texts = _texts(chart)
    assert all(str(s) in texts for s in steps) and "step" in texts and "ms" in texts
    assert {"Computing", "Free", "Communication (not overlapped)"} <= set(texts)  # the legend
    # a bar's height is its mean over ranks: the tallest lane bar is the JSON's largest mean
    computing = _series(chart)["Computing"]
    means = [sum(s["computing_ms"] for s in document["steps"] if s["step"] == step) / RANKS for step in steps]
    heights = [float(b.get("height")) for b in computing]
    assert heights.index(max(heights)) == means.index(max(means))
    assert max(heights) / min(heights) == pytest.approx(max(means) / min(means), rel=0.02)


def test_the_breakdown_per_rank_has_a_bar_per_rank(job):
    figures, _, _ = job
    chart = figures["Breakdown per rank"]
    assert len(_series(chart)["Computing"]) == RANKS
    assert all(str(r) in _texts(chart) for r in range(RANKS))


def test_the_heatmaps_hold_a_cell_per_rank_and_step(job):
    figures, document, _ = job
    for label in ("Step time per rank and step", "Diagnosis per rank and step"):
        pixels = _png(figures[label])
        assert (len(pixels), len(pixels[0])) == (RANKS, STEPS), label
        assert all(str(r) in _texts(figures[label]) for r in range(RANKS))
    grid = _png(figures["Diagnosis per rank and step"])
    assert all(cell == STRAGGLER for cell in grid[SLOW_RANK])
    assert all(cell != STRAGGLER for r, row in enumerate(grid) if r != SLOW_RANK for cell in row)
    # the slowest rank-step is the darkest cell of the step time's map
    slowest = max(document["steps"], key=lambda s: s["step_ms"])
    steps = sorted({s["step"] for s in document["steps"]})
    times = _png(figures["Step time per rank and step"])
    darkest = min(((r, j) for r in range(RANKS) for j in range(STEPS)), key=lambda c: sum(times[c[0]][c[1]]))
    assert darkest == (slowest["rank"], steps.index(slowest["step"]))
    assert "step time (ms)" in _texts(figures["Step time per rank and step"])  # the colour bar's label
    assert len(_png(figures["Wait between ranks"])) == RANKS


def test_the_ops_chart_has_a_bar_per_op_named(job):
    figures, document, _ = job
    chart = figures["Top device ops by total time"]
    ops = document["top_ops"]["all"][:15]
    bars = [rect for g in chart.iter(f"{NS}g") if g.get("class") == "bars" for rect in g.findall(f"{NS}rect")]
    assert len(bars) == len(ops)
    assert [b.find(f"{NS}title").text.rsplit(":", 1)[0] for b in bars] == [o["name"] for o in ops]
    widths = [float(b.get("width")) for b in bars]
    assert widths == sorted(widths, reverse=True)  # the largest on top
    shown = _texts(chart)  # each op named on the axis, a long name by its start and end
    assert all(o["name"] in shown or any(t.startswith(o["name"][:20]) and "…" in t for t in shown)
               for o in ops)


@given(st.floats(-1e9, 1e9), st.floats(1e-6, 1e9))
def test_ticks_are_round_evenly_spaced_and_within_the_range(low, span):
    assume(span >= abs(low) * 1e-6)  # a span a float can split: a plot's axis, not a float's last bits
    ticks = svg.nice_ticks(low, low + span)
    assert 2 <= len(ticks) <= 13
    assert all(low - span * 1e-6 <= t <= low + span * (1 + 1e-6) for t in ticks)
    spacing = ticks[1] - ticks[0]
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(gaps) - min(gaps) <= spacing * 1e-6
    mantissa = spacing / 10 ** math.floor(math.log10(spacing))
    assert any(abs(mantissa - m) < 1e-4 for m in (1, 2, 2.5, 5, 10))
    labels = [svg.tick_label(t, ticks) for t in ticks]
    assert len(set(labels)) == len(labels)  # no two ticks read alike


@given(st.lists(st.lists(st.tuples(*[st.integers(0, 255)] * 3), min_size=3, max_size=3), min_size=1,
                max_size=5))
def test_a_png_holds_its_pixels(rows):
    element = ElementTree.fromstring(
        f'<svg xmlns="http://www.w3.org/2000/svg"><image href="data:image/png;base64,'
        f'{base64.b64encode(svg.png(rows)).decode()}"/></svg>')
    assert _png(element) == rows


def test_the_page_needs_no_plotting_library(tmp_path):
    """With matplotlib and numpy not importable, the page is written all the same."""
    root = tmp_path / "job"
    write_ascend_pt_profile(root, ranks=2, steps=2, tasks_per_step=10, seed=1)
    out = tmp_path / "job.html"
    code = ("import sys; sys.modules['matplotlib'] = sys.modules['numpy'] = None; "
            "from converters.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "report", str(root), "-o", str(out), "-q"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.read_text().count('<svg role="img"') >= 5
