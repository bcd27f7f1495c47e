"""Device descriptors, thread counts and the system information in manifests."""
import os
import platform
import sys

import pytest

import deep500 as d5
from deep500.utils import sysinfo
from deep500.utils.device import CPUDevice, DeviceDescriptor, GPUDevice, parse_device
from deep500.utils.errors import Deep500Error
from deep500.utils.threads import set_thread_counts, thread_conditions


# -- devices ---------------------------------------------------------------------------
@pytest.mark.parametrize("spec, expected", [
    (None, CPUDevice()),
    ("cpu", CPUDevice()),
    ("CPU", CPUDevice()),
    ("gpu", GPUDevice(0)),
    ("gpu:0", GPUDevice(0)),
    ("gpu:3", GPUDevice(3)),
    ("GPU:1", GPUDevice(1)),
    ("cuda", GPUDevice(0)),
    ("cuda:2", GPUDevice(2)),
])
def test_parse_device_forms(spec, expected):
    device = parse_device(spec)
    assert device == expected
    assert type(device) is type(expected)


def test_parse_device_passes_descriptors_through():
    gpu = GPUDevice(5)
    assert parse_device(gpu) is gpu
    cpu = CPUDevice()
    assert parse_device(cpu) is cpu


@pytest.mark.parametrize("spec", ["tpu", "gpu0", "opencl:0", "", "gpu:x", "gpu:-1",
                                  "cuda:1.5", 3])
def test_parse_device_errors(spec):
    with pytest.raises(Deep500Error, match="Unknown device"):
        parse_device(spec)


def test_device_properties():
    cpu, gpu = CPUDevice(), GPUDevice(2)
    assert not cpu.is_gpu and gpu.is_gpu
    assert str(cpu) == "cpu" and str(gpu) == "gpu:2"
    assert cpu.to_dict() == {"type": "cpu"}
    assert gpu.to_dict() == {"type": "gpu", "index": 2}
    assert cpu.torch_device() == "cpu" and gpu.torch_device() == "cuda:2"
    assert cpu.tf_device() == "/CPU:0" and gpu.tf_device() == "/GPU:2"
    assert isinstance(cpu, DeviceDescriptor) and isinstance(gpu, DeviceDescriptor)
    assert d5.CPUDevice is CPUDevice and d5.GPUDevice is GPUDevice
    cpu.synchronize()  # a no-op


def test_gpu_synchronize_without_cuda_is_a_no_op():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present; this checks the CPU-only path")
    GPUDevice(0).synchronize()


# -- threads ---------------------------------------------------------------------------
@pytest.fixture
def restore_threads(monkeypatch):
    """Put torch's and the BLAS libraries' thread counts back after a test."""
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_info, threadpool_limits
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(variable, os.environ.get(variable, ""))
    # TensorFlow's counts can only be set once per process; keep them out of this test.
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    torch_threads = torch.get_num_threads()
    blas = {info["prefix"]: info["num_threads"] for info in threadpool_info()}
    yield torch
    torch.set_num_threads(torch_threads)
    if blas:
        threadpool_limits(limits=blas)


def test_set_thread_counts_sets_torch_and_reports(restore_threads):
    torch = restore_threads
    target = 1 if torch.get_num_threads() != 1 else 2
    conditions = set_thread_counts(target)
    assert torch.get_num_threads() == target
    assert conditions["torch_threads"] == target
    assert conditions["OMP_NUM_THREADS"] == str(target)
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        assert os.environ[variable] == str(target)
    assert "torch_interop_threads" in conditions
    assert all(count == target for count in conditions.get("blas_threads", {}).values())
    assert "tf_intra_op_threads" not in conditions
    assert conditions == thread_conditions()


def test_set_thread_counts_accepts_strings(restore_threads):
    torch = restore_threads
    assert set_thread_counts("1")["torch_threads"] == 1
    assert torch.get_num_threads() == 1


# -- system information ----------------------------------------------------------------
def test_software_versions():
    import numpy
    import onnx
    versions = sysinfo.software_versions()
    assert versions["python"] == platform.python_version()
    assert versions["numpy"] == numpy.__version__
    assert versions["onnx"] == onnx.__version__
    for key in ("deep500", "networkx", "torch", "tensorflow", "onnxruntime", "mpi4py",
                "matplotlib", "mpi_library"):
        assert key in versions
    try:
        import torch
    except ImportError:
        assert versions["torch"] is None
    else:
        assert versions["torch"] == torch.__version__


def test_hardware():
    info = sysinfo.hardware()
    assert isinstance(info["cpu_model"], str) and info["cpu_model"].strip()
    assert info["logical_cpus"] == os.cpu_count() >= 1
    assert info["machine"] == platform.machine()
    if info["usable_cpus"] is not None:
        assert 1 <= info["usable_cpus"] <= info["logical_cpus"]
    if info["physical_cores"] is not None:
        assert 1 <= info["physical_cores"] <= info["logical_cpus"]
    assert isinstance(info["gpus"], list)
    for gpu in info["gpus"]:
        assert set(gpu) == {"index", "name", "memory", "driver"}


def test_thread_counts_restores_what_was_in_force():
    import torch
    from deep500.utils.threads import thread_conditions, thread_counts
    before = thread_conditions()
    torch_before = torch.get_num_threads()
    with thread_counts(1) as inside:
        assert inside["torch_threads"] == 1 and inside["OMP_NUM_THREADS"] == "1"
        assert set(inside["blas_threads"].values()) == {1}
    assert thread_conditions() == before
    assert torch.get_num_threads() == torch_before


def test_thread_counts_restores_after_an_error():
    from deep500.utils.threads import thread_conditions, thread_counts
    before = thread_conditions()
    with pytest.raises(RuntimeError):
        with thread_counts(1):
            raise RuntimeError("measured code failed")
    assert thread_conditions() == before


def test_resolve_threads_is_the_one_default():
    from deep500.utils.threads import resolve_threads, usable_cpu_count
    assert resolve_threads(3, ranks=4) == 3
    assert resolve_threads(None, ranks=1) == usable_cpu_count()
    assert resolve_threads(None, ranks=10 ** 6) == 1
    with pytest.raises(ValueError):
        resolve_threads(0)
