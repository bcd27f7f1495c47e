"""Peak memory of a network's first run in a fresh process, from the kernel's
resident-set high-water mark, for executors whose allocator keeps no complete
statistics (TensorFlow on the CPU: its oneDNN allocator counts only allocations of
256 KiB and more).

A child Python process loads the ONNX model and the inputs, sets the thread count,
builds the executor, and reads ``VmRSS`` from ``/proc/self/status``; it resets the
high-water mark (``5`` written to ``/proc/self/clear_refs``, Linux 4.0+,
Documentation/filesystems/proc.rst), runs inference (or inference and backprop) once,
and reads ``VmHWM``. The peak is ``VmHWM - VmRSS``: every page the run touched beyond
what the process held, whoever allocated it (the framework's pools, oneDNN's buffers,
the C heap). The run is the process's first, so one-time work (kernel selection,
primitive caches) is in it; a later run in the same process would reuse pages already
resident and show almost nothing, which is why the process is fresh.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from deep500.utils.errors import Deep500Error

METHOD = ("RSS high-water of the first run in a fresh process (VmHWM after it less "
          "VmRSS before it)")


def first_run_peak_rss(model, inputs: dict, executor: str, device: str, mode: str,
                       threads: int | None, y: str = "loss", timeout: float = 600) -> int:
    """Bytes of resident memory the first ``mode`` run (``inference`` or ``backprop``)
    of ``model`` on ``executor`` added, measured in a child process."""
    import onnx
    if not os.path.exists("/proc/self/clear_refs"):
        raise Deep500Error("peak memory from a fresh process needs Linux's "
                           "/proc/self/clear_refs, which this system has not")
    with tempfile.TemporaryDirectory(prefix="d5_peak_rss_") as folder:
        onnx.save(model, os.path.join(folder, "model.onnx"))
        np.savez(os.path.join(folder, "inputs.npz"), **inputs)
        with open(os.path.join(folder, "spec.json"), "w") as spec:
            json.dump({"executor": executor, "device": device, "mode": mode,
                       "threads": threads, "y": y}, spec)
        child = subprocess.run([sys.executable, "-m", __name__, folder],
                               capture_output=True, text=True, timeout=timeout)
        if child.returncode != 0:
            last = (child.stderr.strip().splitlines() or ["no output"])[-1]
            raise Deep500Error(f"the fresh process measuring the {executor} executor's "
                               f"peak memory failed ({last})")
        with open(os.path.join(folder, "peak.json")) as result:
            return int(json.load(result)["peak_bytes"])


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise Deep500Error(f"/proc/self/status has no {field}")


def _measure(folder: str) -> None:
    with open(os.path.join(folder, "spec.json")) as spec_file:
        spec = json.load(spec_file)
    if spec["threads"]:
        from deep500.utils.threads import set_thread_counts
        set_thread_counts(spec["threads"])
    from deep500.frameworks import registry
    import onnx
    model = onnx.load(os.path.join(folder, "model.onnx"))
    with np.load(os.path.join(folder, "inputs.npz")) as stored:
        inputs = {name: stored[name] for name in stored.files}
    executor = registry.executor_factory(spec["executor"])(model, device=spec["device"])
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    if spec["mode"] == "backprop":
        executor.inference_and_backprop(inputs, spec["y"])
    else:
        executor.inference(inputs)
    peak = (_status_kib("VmHWM") - before) * 1024
    with open(os.path.join(folder, "peak.json"), "w") as result:
        json.dump({"peak_bytes": max(peak, 0)}, result)


if __name__ == "__main__":
    _measure(sys.argv[1])
