"""Device descriptors: where a measured computation runs, and how to wait for it.

Accelerators run asynchronously; a clock read without synchronising measures only the
launch. Timers call ``device.synchronize()`` before reading the clock.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceDescriptor:
    """Base class of devices. ``synchronize()`` returns when all queued work is done."""

    def synchronize(self) -> None:
        """Nothing to wait for on a synchronous device."""

    @property
    def is_gpu(self) -> bool:
        return False

    def to_dict(self) -> dict:
        return {"type": "cpu"}


@dataclass(frozen=True)
class CPUDevice(DeviceDescriptor):
    """The host CPU. Work on it is synchronous from Python's point of view."""

    def torch_device(self) -> str:
        return "cpu"

    def tf_device(self) -> str:
        return "/CPU:0"

    def __str__(self) -> str:
        return "cpu"


@dataclass(frozen=True)
class GPUDevice(DeviceDescriptor):
    """A CUDA GPU by index. ``synchronize`` waits on the frameworks that are loaded."""
    index: int = 0

    @property
    def is_gpu(self) -> bool:
        return True

    def torch_device(self) -> str:
        return f"cuda:{self.index}"

    def tf_device(self) -> str:
        return f"/GPU:{self.index}"

    def synchronize(self) -> None:
        import sys
        # Only frameworks already imported can have queued work on the device.
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.synchronize(self.index)
        tf = sys.modules.get("tensorflow")
        if tf is not None and hasattr(tf, "experimental"):
            try:
                tf.experimental.async_wait()
            except Exception:  # noqa: BLE001 - nothing queued, or no async executor
                pass

    def to_dict(self) -> dict:
        return {"type": "gpu", "index": self.index}

    def __str__(self) -> str:
        return f"gpu:{self.index}"


def parse_device(spec) -> DeviceDescriptor:
    """``'cpu'``, ``'gpu'``, ``'gpu:1'``, ``'cuda:0'`` or a descriptor → a descriptor."""
    from deep500.utils.errors import Deep500Error
    if isinstance(spec, DeviceDescriptor):
        return spec
    if spec is None or str(spec).lower() == "cpu":
        return CPUDevice()
    kind, _, index = str(spec).lower().partition(":")
    if kind in ("gpu", "cuda"):
        if index and not index.isdecimal():
            raise Deep500Error(f"Unknown device {spec!r}: the GPU index must be a "
                               f"non-negative integer, as in 'gpu:1'")
        return GPUDevice(int(index or 0))
    raise Deep500Error(f"Unknown device {spec!r}: use 'cpu', 'gpu' or 'gpu:N'")
