"""Peak memory of a TensorFlow run, as TensorFlow's allocator reports it, where its
report is complete.

On a GPU, ``tf.config.experimental.reset_memory_stats(device)`` before the run and
``get_memory_info(device)["peak"]`` after it give the most bytes TensorFlow's BFC
allocator held during the run; the bytes it held when the run began are subtracted, so
that the figure is what the run allocated, as for the other executors.

On the CPU the same calls answer, but incompletely: TensorFlow's oneDNN CPU allocator
counts only its large allocations (in TensorFlow 2.21 a live 160 kB tensor is not
counted, a 400 kB one is), so a small network reports 0. The CPU figure is therefore
not reported in-process; ``deep500.frameworks.fresh_process_memory`` measures it.
"""
from __future__ import annotations

from deep500.frameworks.tensorflow._tf import tf

METHOD = "tf.config.experimental.get_memory_info (peak above the run's start)"
CPU_NOTE = ("TensorFlow's CPU allocator counts only large allocations (a 160 kB tensor "
            "is not counted), so it is not asked")


class TensorFlowPeakMemory:
    """One measurement on a GPU: ``start()`` before the run, ``stop()`` after it gives
    the peak bytes above what the allocator held when the run began (None on the CPU,
    see the module docstring)."""

    method = METHOD

    def __init__(self, device):
        self.name = device.tf_device().lstrip("/")
        self.on_gpu = device.is_gpu
        self._baseline = 0

    def start(self) -> None:
        if self.on_gpu:
            tf.config.experimental.reset_memory_stats(self.name)
            self._baseline = tf.config.experimental.get_memory_info(self.name)["current"]

    def stop(self) -> int | None:
        if not self.on_gpu:
            return None
        return int(tf.config.experimental.get_memory_info(self.name)["peak"] -
                   self._baseline)
