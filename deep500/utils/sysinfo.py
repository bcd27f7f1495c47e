"""What software and hardware a measurement ran on (for ``deep500 info`` and manifests)."""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import subprocess
import sys


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def software_versions() -> dict:
    """Versions of Python and of every library Deep500 may use (None = not installed)."""
    versions = {"python": platform.python_version(), "deep500": _version("deep500")}
    for key, distribution in (("numpy", "numpy"), ("onnx", "onnx"), ("networkx", "networkx"),
                              ("torch", "torch"), ("tensorflow", "tensorflow-cpu"),
                              ("onnxruntime", "onnxruntime"), ("mpi4py", "mpi4py"),
                              ("matplotlib", "matplotlib")):
        versions[key] = _version(distribution)
    if versions["tensorflow"] is None:
        versions["tensorflow"] = _version("tensorflow")
    versions["mpi_library"] = mpi_library_version()
    return versions


def mpi_library_version() -> str | None:
    """The MPI library's own version line (e.g. 'MPICH Version: 4.x'), without MPI_Init."""
    try:
        from mpi4py import MPI  # noqa: F401 - loads the library; init is deferred below
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001 - a broken MPI install is reported, not fatal
        return f"unavailable ({exc})"
    try:
        line = MPI.Get_library_version().strip().splitlines()[0]
        return " ".join(line.split())
    except Exception as exc:  # noqa: BLE001
        return f"unavailable ({exc})"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def physical_cores() -> int | None:
    """Physical cores from /proc/cpuinfo (unique core ids per package), if readable."""
    try:
        cores, physical, core = set(), None, None
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("physical id"):
                    physical = line.split(":")[1].strip()
                elif line.startswith("core id"):
                    core = line.split(":")[1].strip()
                elif not line.strip() and core is not None:
                    cores.add((physical, core))
                    core = None
        return len(cores) or None
    except OSError:
        return None


def gpus() -> list[dict]:
    """GPUs seen by nvidia-smi (without importing a framework)."""
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    if output.returncode != 0:
        return []
    found = []
    for line in output.stdout.strip().splitlines():
        index, name, memory, driver = [p.strip() for p in line.split(",")]
        found.append({"index": int(index), "name": name, "memory": memory, "driver": driver})
    return found


def hardware() -> dict:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_model": cpu_model(), "logical_cpus": os.cpu_count(),
            "physical_cores": physical_cores(), "usable_cpus": affinity,
            "machine": platform.machine(), "os": platform.platform(),
            "hostname": platform.node(), "gpus": gpus()}


def git_revision(path: str) -> str | None:
    """The git commit of the checkout containing ``path`` (with '-dirty'), if any."""
    try:
        revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True,
                                  text=True, timeout=10)
        if revision.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=path, capture_output=True, text=True, timeout=10)
        return revision.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def loaded_frameworks() -> tuple[str, ...]:
    """The frameworks whose thread settings :func:`framework_threads` reads, among those
    this process has imported."""
    return tuple(name for name in ("torch", "tensorflow") if name in sys.modules)


def framework_threads(imported_only: bool = False) -> dict:
    """Thread settings of the frameworks that can be imported (imports them: seconds
    for PyTorch and TensorFlow), or, with ``imported_only``, of those this process
    imported already (milliseconds; what a run's manifest records)."""
    threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
    loaded = loaded_frameworks()
    try:
        if imported_only and "torch" not in loaded:
            raise ImportError
        torch = importlib.import_module("torch")
        threads["torch_intra_op"] = torch.get_num_threads()
        threads["torch_inter_op"] = torch.get_num_interop_threads()
    except ImportError:
        pass
    try:
        if imported_only and "tensorflow" not in loaded:
            raise ImportError
        from deep500.utils.tensorflow_import import import_tensorflow
        tf = import_tensorflow()
        threads["tf_intra_op"] = tf.config.threading.get_intra_op_parallelism_threads() or "auto"
        threads["tf_inter_op"] = tf.config.threading.get_inter_op_parallelism_threads() or "auto"
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info
        threads["blas"] = {i.get("internal_api"): i.get("num_threads") for i in threadpool_info()}
    except ImportError:
        pass
    return threads


def cuda_devices() -> list[str]:
    """CUDA devices as PyTorch sees them, if PyTorch is installed."""
    if "torch" not in sys.modules and _version("torch") is None:
        return []
    torch = importlib.import_module("torch")
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
