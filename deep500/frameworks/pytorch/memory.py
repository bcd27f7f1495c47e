"""Peak memory of a PyTorch run, as PyTorch's own allocators report it.

On the CPU, PyTorch keeps no peak statistic, but its CPU allocator reports every
allocation and free to the profiler (``torch.profiler.profile(profile_memory=True)``,
one ``[memory]`` event with the signed byte count each). The running sum of those
events, in time order, is the bytes allocated since the run began; its maximum is the
run's peak. On a GPU, ``torch.cuda.max_memory_allocated`` after
``torch.cuda.reset_peak_memory_stats`` gives the same quantity for the caching
allocator. Memory a library allocates past PyTorch's allocator (oneDNN's primitive
caches, the Python heap) is not seen.
"""
from __future__ import annotations

import torch

PROFILER_METHOD = "torch.profiler allocator events (CPU, peak above the run's start)"
CUDA_METHOD = "torch.cuda.max_memory_allocated (peak above the run's start)"


class TorchPeakMemory:
    """One measurement: ``start()`` before the run, ``stop()`` after it gives the peak
    bytes the run allocated above what was allocated when it began."""

    def __init__(self, device):
        self.device = device
        self.method = CUDA_METHOD if device.is_gpu else PROFILER_METHOD
        self._profiler = None
        self._baseline = 0

    def start(self) -> None:
        if self.device.is_gpu:
            torch.cuda.synchronize(self.device.index)
            torch.cuda.reset_peak_memory_stats(self.device.index)
            self._baseline = torch.cuda.memory_allocated(self.device.index)
            return
        self._profiler = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
        self._profiler.__enter__()

    def stop(self) -> int:
        if self.device.is_gpu:
            torch.cuda.synchronize(self.device.index)
            return int(torch.cuda.max_memory_allocated(self.device.index) - self._baseline)
        profiler, self._profiler = self._profiler, None
        profiler.__exit__(None, None, None)
        return peak_of_allocator_events(profiler.profiler.kineto_results.events())


def peak_of_allocator_events(events) -> int:
    """The largest running sum of the CPU allocator's signed byte counts, in time
    order (0 when nothing was allocated)."""
    changes = sorted((e.start_ns(), e.nbytes()) for e in events
                     if e.name() == "[memory]" and e.device_type() ==
                     torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, nbytes in changes:
        live += nbytes
        peak = max(peak, live)
    return peak
