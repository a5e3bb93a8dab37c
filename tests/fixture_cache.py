"""Generated profiles made once and kept under build/fixture-cache, for the fixtures that take
long to make: keyed by the generator, its arguments, its module's source and that of fixtures/
(a changed generator makes them again), so every run and every test process after the first
reads them in no time. ``make clean`` (or removing the folder) drops them.

Two test processes asking for one profile at once: the first makes it under a lock, the second
waits and reads it; the result is recorded last (a file renamed into place), so a run killed
half-way leaves no profile that looks made. Tests must not change a cached profile (write outputs
elsewhere: ``out_dir``)."""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "fixture-cache"
T = TypeVar("T")


def cached(generator: Callable[..., T], *args, **kwargs) -> tuple[Path, T]:
    """``generator(folder, *args, **kwargs)`` run once into a folder of the cache: the folder and
    what the generator returned (as it returned it the first time)."""
    call = f"{generator.__module__}.{generator.__qualname__}{args!r}{sorted(kwargs.items())!r}"
    assert " at 0x" not in call, f"an argument without a stable repr makes no key: {call}"
    sources = [Path(inspect.getfile(generator)), *sorted((ROOT / "fixtures").glob("*.py"))]
    source = b"".join(path.read_bytes() for path in sources)
    key = hashlib.sha256(call.encode() + source).hexdigest()[:16]
    folder, made = CACHE / f"{generator.__name__}-{key}", CACHE / f"{generator.__name__}-{key}.pickle"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a killed run left half made
            folder.mkdir()
            result = generator(folder, *args, **kwargs)
            partial = made.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(result))
            os.replace(partial, made)
    return folder, pickle.loads(made.read_bytes())
