"""The HTML report in a real browser: headless Chromium (Debian's ``chromium``, driven by
Playwright) opens it from a file:// URL with the network cut off, and it must render with no
console message or page error, every plot drawn and visible, its inline images decodable, and
the same with JavaScript off (as a mail reader shows an attachment). Screenshots go to build/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.msprof_gen import write_msprof_profile

REPO = Path(__file__).parents[1]
BROWSER_ENV = "TRACE2PERFETTO_CHROMIUM"
CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
SECTIONS = ("job", "verdict", "step-time", "breakdown", "diagnosis", "critical", "ranks", "ops", "op-types",
            "method")
# and where the job has them: "links" (HCCL plane tasks), "data" (MindData), "memory"


def _chromium() -> str:
    """Where the browser is, or skip with the reason."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install playwright: the test extra has it)")
    found = os.environ.get(BROWSER_ENV) or next((c for c in CANDIDATES if Path(c).exists()), None) \
        or shutil.which("chromium")
    if not found or not Path(found).exists():
        pytest.skip(f"no Chromium found (apt-get install chromium, or set {BROWSER_ENV} to its binary)")
    return found


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=ARGS)
        yield launched
        launched.close()


def _slow_job(root: Path) -> None:
    write_ascend_pt_profile(root, ranks=6, steps=4, tasks_per_step=30, ranks_per_host=3,
                            slow_rank=3, slow_ns=2_000_000, seed=7)


def _msprof_job(root: Path) -> None:
    write_msprof_profile(root, ranks=4, graphs=(2,), steps=6, tasks_per_step=60, seed=5)


# (profile writer, screenshot name, plots per section): the slow job has stragglers and waits, the
# msprof job the step trace's phases
CASES = {
    "slow-rank": (_slow_job, "report-screenshot.png",
                  {"step-time": 1, "breakdown": 2, "diagnosis": 1, "critical": 1, "ranks": 1, "links": 1,
                   "ops": 1, "op-types": 1}),
    "msprof": (_msprof_job, "report-screenshot-msprof.png",
               {"step-time": 1, "breakdown": 3, "diagnosis": 1, "critical": 1, "ranks": 1, "ops": 1,
                "op-types": 1}),
}


def _open(browser, page_path: Path, javascript: bool = True):
    """A page showing the report, with every message it logs and every request it tried."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=javascript)
    messages: list[str] = []
    requests: list[str] = []

    def route(r):
        url = r.request.url
        if url.startswith(("file://", "data:")):
            r.continue_()
        else:  # nothing may come from the network
            requests.append(url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: messages.append(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: messages.append(f"page error: {e}"))
    page.goto(page_path.as_uri(), wait_until="load")
    return context, page, messages, requests


@pytest.mark.parametrize("case", list(CASES))
def test_the_report_renders_in_chromium(browser, tmp_path, case):
    write, screenshot, plots = CASES[case]
    root = tmp_path / case
    write(root)
    out = tmp_path / f"{case}.html"
    assert main(["report", str(root), "-o", str(out), "-q"]) == 0
    context, page, messages, requests = _open(browser, out)
    try:
        assert messages == [] and requests == []
        for section in SECTIONS:
            assert page.locator(f"section#{section}").is_visible(), section
        for section, count in plots.items():
            found = page.locator(f"section#{section} svg.plot")
            assert found.count() == count, section
            for i in range(count):
                plot, box = found.nth(i), found.nth(i).bounding_box()
                assert plot.is_visible() and box["width"] > 300 and box["height"] > 100, (section, i, box)
        # the heatmaps' rasters are inline PNGs the browser decodes
        sizes = page.evaluate("""() => Promise.all([...document.querySelectorAll('svg image')].map(i => {
            const image = new Image();
            image.src = i.getAttribute('xlink:href') || i.getAttribute('href');
            return image.decode().then(() => [image.naturalWidth, image.naturalHeight]);
        }))""")
        assert len(sizes) >= 3 and all(w > 0 and h > 0 for w, h in sizes)
        # text in the plots is laid out by the page's fonts, and the page fits the window's width
        widths = page.evaluate("() => [...document.querySelectorAll('svg.plot text')]"
                               ".map(t => t.getBBox().width)")
        assert widths and sum(w > 0 for w in widths) > 0.9 * len(widths)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
        assert page.locator("section#verdict .verdict").inner_text().strip()
        (REPO / "build").mkdir(exist_ok=True)
        page.screenshot(path=str(REPO / "build" / screenshot), full_page=True)
    finally:
        context.close()
    assert (REPO / "build" / screenshot).stat().st_size > 10_000


def test_the_report_needs_no_javascript(browser, tmp_path):
    """As a mail reader shows an attachment: scripts off, the same plots."""
    root = tmp_path / "job"
    _slow_job(root)
    out = tmp_path / "job.html"
    assert main(["report", str(root), "-o", str(out), "-q"]) == 0
    context, page, messages, requests = _open(browser, out, javascript=False)
    try:
        assert messages == [] and requests == []
        assert page.locator("svg.plot").count() == 9  # with the links, the op types, the critical path
        assert all(page.locator("svg.plot").nth(i).is_visible() for i in range(9))
    finally:
        context.close()


def test_commands_break_at_spaces_only(browser, tmp_path):
    """A command in a table cell wraps between its words, never inside a path or an option, so it
    reads (and copies) as typed; a table too wide for the page scrolls on its own."""
    root = tmp_path / "a-profile-folder-with-a-long-name" / "job"
    _slow_job(root)
    out = tmp_path / "job.html"
    assert main(["report", str(root), "-o", str(out), "-q"]) == 0
    context, page, messages, _ = _open(browser, out)
    try:
        broken = page.evaluate("""() => [...document.querySelectorAll('.cmd')].flatMap(el => {
            const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT), chars = [], found = [];
            for (let node; (node = walk.nextNode());)
                for (let i = 0; i < node.length; i++) chars.push([node, i]);
            const s = chars.map(([node, i]) => node.data[i]).join(''), range = document.createRange();
            let top = null;
            chars.forEach(([node, i], k) => {
                range.setStart(node, i);
                range.setEnd(node, i + 1);
                const box = range.getClientRects()[0];
                if (!box) return;
                if (top !== null && box.top > top + 1 && s[k - 1] !== ' ' && s[k] !== ' ')
                    found.push(s.slice(Math.max(0, k - 12), k) + '|' + s.slice(k, k + 12));
                top = box.top;
            });
            return found;
        })""")
        assert page.locator(".cmd").count() > 5
        assert broken == []
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    finally:
        context.close()
