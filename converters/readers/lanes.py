"""Lane names whose meaning reaches past their reader: a GPU's streams, which the layout draws in
a group of their own, where an NPU's streams would be."""

from __future__ import annotations

_PREFIX = "GPU "


def gpu_stream(device: object, stream: object) -> str:
    """The lane of a GPU's stream, ``GPU 0 Stream 7`` (Kineto's and Paddle's)."""
    return f"{_PREFIX}{device} Stream {stream}"


def on_gpu(lane: str) -> bool:
    """Whether a device lane is a GPU's: the readers' GPU streams, or a device process a Chrome
    trace names ``GPU ...`` (``GPU 0 / 7``)."""
    return lane.startswith(_PREFIX)
