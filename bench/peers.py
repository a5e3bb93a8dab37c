"""Peer tools for the benchmark: MindInsight 2.3.1, in a bench-only venv of its own.

The peer is ``MsprofTimelineAnalyser.get_merged_timeline`` (``mindinsight/profiler/analyser/
msprof_timeline_analyser.py``), the function behind MindInsight's merged msprof timeline view.
``bench/peer_mindinsight.py`` runs it inside ``build/bench/mindinsight-venv`` (MindInsight pins
protobuf 3.20, so it never shares the project's venv); see its docstring for the exact call, the
kinds (``summary``/``detail`` map 1:1 to MindInsight's ``kind``) and how MindSpore 2.0-2.2
profiles are presented to it (MindInsight 2.3.1 itself reads only the CANN 7/8 layout).

``python -m bench.peers --setup`` makes the venv; ``python -m bench.peers PROFILE --kind K``
runs the peer once and prints the measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MINDINSIGHT = "mindinsight==2.3.1"
PEER = Path(__file__).resolve().with_name("peer_mindinsight.py")


def ensure_mindinsight_venv(root: Path = ROOT) -> Path:
    """Python of ``root/build/bench/mindinsight-venv``, created and filled when missing.

    ``root`` is the checkout. The venv uses the interpreter running this (the project's Python,
    so both tools run on the same version); ``pip install mindinsight==2.3.1`` takes a few
    minutes. A stamp file marks a finished install, so an interrupted one starts over.
    """
    venv = root / "build" / "bench" / "mindinsight-venv"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists():
        return python
    started = time.perf_counter()
    print(f"peers: creating {venv} and installing {MINDINSIGHT} (a few minutes)...", file=sys.stderr)
    quiet = {"check": True, "stdout": sys.stderr}
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], **quiet)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    MINDINSIGHT], **quiet)
    subprocess.run([str(python), "-c", "import mindinsight.profiler.analyser.msprof_timeline_analyser"],
                   env={**os.environ, "MINDINSIGHT_WORKSPACE": str(venv / "workspace")}, **quiet)
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], check=True, capture_output=True)
    stamp.write_bytes(freeze.stdout)          # the versions that were measured
    print(f"peers: {MINDINSIGHT} ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return python


def run_mindinsight(profile: Path, kind: str, out: Path, ranks: list[int] | None = None) -> dict:
    """Run the peer on ``profile`` in a child process, writing its timeline JSON to ``out``.

    Returns seconds (wall time of the child, interpreter start and imports included),
    peak_rss_mib, output_bytes, events, and the peer's own report (call_seconds, per_process...).
    peak_rss_mib is the child's own VmHWM: ``wait4``'s ru_maxrss (kept as ru_maxrss_mib) also
    counts the RSS the child inherited from this process before exec, so it never reads below
    the bench's own size.
    """
    python = ensure_mindinsight_venv(ROOT)
    argv = [str(python), str(PEER), str(profile), "--kind", kind, "--out", str(out)]
    if ranks:
        argv += ["--ranks", *map(str, ranks)]
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
        report = child.stdout.read()          # one line; MindInsight's log goes to stderr
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"MindInsight {kind} on {profile} failed ({child.returncode}): "
                               f"{report.decode()}{err.read().decode()[-2000:]}")
    report = json.loads(report)
    ru_maxrss_mib = usage.ru_maxrss / 1024
    return {"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": report.pop("vm_hwm_mib") or ru_maxrss_mib,
            "output_bytes": out.stat().st_size, "events": report.pop("events"),
            "ru_maxrss_mib": ru_maxrss_mib, **report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, nargs="?")
    parser.add_argument("--kind", choices=("summary", "detail"), default="detail")
    parser.add_argument("--out", type=Path, help="default: build/bench/mindinsight-KIND.json")
    parser.add_argument("--setup", action="store_true", help="only make the venv")
    args = parser.parse_args()
    if args.setup or not args.profile:
        print(ensure_mindinsight_venv(ROOT))
        return
    out = args.out or ROOT / "build" / "bench" / f"mindinsight-{args.kind}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(json.dumps(run_mindinsight(args.profile, args.kind, out)))


if __name__ == "__main__":
    main()
