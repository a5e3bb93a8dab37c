"""How the report writes its numbers and names in sentences and in its JSON: milliseconds, a long
name cut to its start and end, a what-if as the verdict says it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..critical import WhatIf


def ms(ns: float | None) -> float | None:
    """ns as ms, as the findings and the JSON give them."""
    return None if ns is None else round(ns / 1e6, 6)


def ms_text(ns: float) -> str:
    """ns as ms in a sentence: three significant digits, whole ms from 100 ms."""
    millis = ns / 1e6
    return f"{millis:.3g} ms" if millis < 100 else f"{millis:,.0f} ms"


def short(name: str, n: int = 60) -> str:
    """At most ``n`` characters of ``name``: its start and its end, which tell ops apart."""
    return name if len(name) <= n else name[: n // 2 - 1] + "…" + name[-(n // 2 - 1):]


def change(w: WhatIf, limit: int | None = None) -> str:
    """A what-if as the verdict says it; ``limit``: its target's characters at most (a kernel's
    name can run to hundreds)."""
    target = w.target if limit is None else short(w.target, limit)
    if w.kind == "late_arrival":
        return f"rank {w.rank} arriving at {target} with the others"
    if w.kind == "overlap_comm":
        return f"{target} on rank {w.rank} fully hidden"
    return f"every {target} on rank {w.rank} 10% shorter"
