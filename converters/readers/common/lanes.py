"""Lane names whose meaning reaches past their reader: an accelerator's streams (a GPU's, an
MTIA's, a TPU's lines), which the layout draws in a group of their own, where an NPU's streams
would be."""

from __future__ import annotations

_PREFIX = "GPU "
_MTIA = "MTIA "
_TPU = "TPU "
_GROUPS = {_PREFIX: "GPU", _MTIA: "MTIA", _TPU: "TPU"}


def gpu_stream(device: object, stream: object) -> str:
    """The lane of a GPU's stream, ``GPU 0 Stream 7`` (Kineto's and Paddle's)."""
    return f"{_PREFIX}{device} Stream {stream}"


def tpu_line(device: object, line: str) -> str:
    """The lane of a TPU's line of work, ``TPU 0 XLA Ops`` (XLA's profiler names the lines)."""
    return f"{_TPU}{device} {line}"


def mtia_lane(device: str, queue: str) -> str:
    """The lane of an MTIA device's queue as Kineto names both: ``MTIA 9 Stream 1 FW``,
    ``MTIA 9 DMA_REQUEST``."""
    return f"{device} {queue}" if device.startswith(_MTIA) else f"{_MTIA}{device} {queue}"


def accelerator(lane: str) -> str | None:
    """The group of a device lane that is an accelerator's (``GPU``, ``MTIA``, ``TPU``): the
    readers' GPU, MTIA and TPU lanes, or a device process a Chrome trace names ``GPU ...``
    (``GPU 0 / 7``); None for others (an NPU's streams)."""
    return next((group for prefix, group in _GROUPS.items() if lane.startswith(prefix)), None)
