"""Data-parallel SGD whose gradient exchange is a compiled C++ operator calling MPI on
the fused gradient buffer's memory: a dense allreduce (``CppConsistentDecentralized``)
and a sparse top-k allreduce with error feedback (``SparseTopKDecentralized``).

Both are the Python ``ConsistentDecentralized`` with the collective swapped for a
Deep500 custom operator (``deep500/lv3_distributed/kernels``), built once per process
by :func:`~deep500.lv3_distributed.mpi_toolchain.compile_mpi_cppop` (every rank calls it
at once; the build cache's lock lets one rank build while the others wait, then all
load the same library) and given a duplicate of the scheme's communicator by its
Fortran handle.

Traffic: MPI runs these collectives inside C++, where Deep500 cannot count messages, so
each call records a modelled volume in ``comm.volume`` (payload bytes, as the rest of
``volume.py``; MPI's headers excluded):

* ``("allreduce", "cpp-mpi")``, ``modelled (ring)``: the bandwidth-optimal ring
  allreduce of the n-element buffer, ``2(p-1)/p * n * itemsize`` each way per rank
  (:func:`~deep500.lv3_distributed.volume.ring_allreduce_traffic`), as for
  ``ConsistentDecentralized(algorithm="mpi")``;
* ``("sparse_allgather", "cpp-mpi")``, ``modelled (ring allgather)``: the allgather of
  each rank's k packed (int64 index, value) records, ``(p-1) * k * (8 + itemsize)``
  bytes sent and received per rank in ``p-1`` messages each way
  (:func:`ring_allgather_traffic`). MPICH may pick recursive doubling or Bruck's
  algorithm instead, which move the same bytes in ``ceil(log2 p)`` messages.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.lv0_operators.cpp_op import CustomCPPOp
from deep500.lv3_distributed.distributed_optimizer import DistributedOptimizer
from deep500.lv3_distributed.mpi_toolchain import compile_mpi_cppop, kernel_path
from deep500.lv3_distributed.volume import Traffic, modelled, ring_allreduce_traffic
from deep500.utils.errors import Deep500Error, UnsupportedError
from deep500.utils.tensor_desc import TensorDescriptor

DENSE_COLLECTIVE = ("allreduce", "cpp-mpi")
SPARSE_COLLECTIVE = ("sparse_allgather", "cpp-mpi")
INDEX_BYTES = 8  # int64 index of each sent entry
_DTYPES = ("float32", "float64")
_descriptors: dict = {}  # built operators of this process, by kernel, size, dtype, average


def ring_allgather_traffic(nbytes: int, size: int) -> Traffic:
    """The ring allgather of ``nbytes`` per rank: in each of p - 1 steps a rank passes
    one block to its right neighbour and receives one from its left (Thakur,
    Rabenseifner & Gropp, IJHPCA 2005), so ``(p-1) * nbytes`` each way."""
    if size == 1:
        return Traffic(0, 0, 0, 0)
    return Traffic((size - 1) * nbytes, (size - 1) * nbytes, size - 1, size - 1)


def _built(kernel: str, count: int, dtype, average: bool, inputs: list, outputs: int):
    dtype = np.dtype(dtype)
    if dtype.name not in _DTYPES:
        raise Deep500Error(f"The C++ MPI operators reduce float32 or float64 buffers; "
                           f"got {dtype}")
    key = (kernel, int(count), dtype.name, bool(average))
    if key not in _descriptors:
        data = TensorDescriptor(dtype.name, [int(count)])
        _descriptors[key] = compile_mpi_cppop(
            kernel, kernel_path(f"{kernel}.cpp"),
            [data, *(TensorDescriptor("int64", [1]) for _ in range(inputs))],
            [data] * outputs, {"AVERAGE": int(bool(average))})
    return CustomCPPOp(_descriptors[key])


def allreduce_operator(count: int, dtype="float32", average: bool = True) -> CustomCPPOp:
    """The ``mpi_allreduce`` kernel for 1-D buffers of ``count`` elements:
    ``op(x, comm_handle) -> y`` (``comm_handle``: ``np.array([comm.py2f()], np.int64)``),
    y the sum (or mean) of every rank's x; backward allreduces the gradients."""
    return _built("mpi_allreduce", count, dtype, average, inputs=1, outputs=1)


def sparse_topk_operator(count: int, dtype="float32", average: bool = True) -> CustomCPPOp:
    """The ``sparse_topk_allreduce`` kernel for 1-D buffers of ``count`` elements:
    ``op(x, comm_handle, k) -> (y, residual)``, y the sum (or mean) over ranks of each
    rank's k largest-magnitude entries, residual what this rank did not send."""
    return _built("sparse_topk_allreduce", count, dtype, average, inputs=2, outputs=2)


class _CppScheme(DistributedOptimizer):
    """What both schemes share: the operator's communicator and output buffer.
    ``comm_dtype``: only ``"float32"``; the C++ kernels reduce float32 or float64
    buffers in MPI and have no 16-bit wire."""
    #: Why overlap=True is refused (DistributedOptimizer.check_overlap).
    cannot_overlap = (
        "its collective runs inside one C++ operator, a single blocking MPI call after "
        "backprop; ConsistentDecentralized(algorithm='mpi', overlap=True) runs the "
        "same MPI allreduce per bucket during backprop")

    def __init__(self, base_optimizer, comm=None, comm_dtype: str = "float32",
                 overlap: bool = False):
        self.check_options(comm_dtype, overlap=overlap)
        super().__init__(base_optimizer, comm, comm_dtype, overlap)
        buffer = self.fused().buffer
        self._op_comm = self.comm.comm.Dup()  # collective; the operator's own messages
        self._handle = np.array([self._op_comm.py2f()], np.int64)
        self._out = np.empty_like(buffer)

    def close(self) -> None:
        if self._op_comm is not None:
            self._op_comm.Free()
            self._op_comm = None

    @classmethod
    def check_options(cls, comm_dtype: str = "float32", **options) -> None:
        super().check_options(comm_dtype, **options)
        if comm_dtype != "float32":
            raise UnsupportedError(
                f"{cls.__name__}: comm_dtype={comm_dtype!r}: the C++ MPI operators send "
                f"float32 (or float64) buffers; use comm_dtype='float32', or "
                f"ConsistentDecentralized, whose allreduces all carry "
                f"float16 and bfloat16")

    def _record(self, collective: tuple[str, str], model: str, traffic: Traffic) -> None:
        self.comm.volume.record_traffic(*collective, modelled(model), traffic)


class CppConsistentDecentralized(_CppScheme):
    """Allreduce the fused gradients with the C++ ``mpi_allreduce`` operator
    (``MPI_Allreduce`` on the buffer's memory), then update on every rank.

    ``average``: divide the sum by p (default, as ``ConsistentDecentralized``); else
    apply the sum. The parameters equal those of ``ConsistentDecentralized`` up to the
    summation order of MPI's algorithm; every rank gets MPI's bit-identical result.
    """
    consistent = True

    def __init__(self, base_optimizer, comm=None, average: bool = True,
                 comm_dtype: str = "float32", overlap: bool = False):
        super().__init__(base_optimizer, comm, comm_dtype, overlap)
        self.average = bool(average)
        buffer = self.fused().buffer
        self.operator = allreduce_operator(buffer.size, buffer.dtype, self.average)
        self._traffic = ring_allreduce_traffic(buffer.size, buffer.itemsize, self.size,
                                               self.rank)

    def scheme_hyperparameters(self) -> dict:
        return {"allreduce": "cpp-mpi", "average": self.average}

    def step(self, inputs: dict) -> dict:
        outputs, fused, buffer = self.packed_gradients(inputs)
        with self.phase("communication"):
            self.operator.run_forward([buffer.ctypes.data, self._handle.ctypes.data,
                                       self._out.ctypes.data])
        self._record(DENSE_COLLECTIVE, "ring", self._traffic)
        self.apply_gradients(fused.unpack(self._out))
        return self._finish_step(inputs, outputs)

    def analytic_traffic(self, steps: int) -> dict:
        return self.ring_allreduce_traffic(
            steps, "the gradients by the C++ MPI operator every step, modelled as the ring")


class SparseTopKDecentralized(_CppScheme):
    """Sparse data-parallel SGD with error feedback: each rank adds its residual to its
    gradient, sends the k = ceil(density * n) entries of largest magnitude (SparCML's
    top-k sparsification; Renggli et al., SC'19), keeps the rest as the next residual
    (error feedback as in Deep Gradient Compression, Lin et al., ICLR 2018, and
    "Sparsified SGD with memory", Stich et al., NeurIPS 2018), and every rank applies
    the mean over ranks of the sent entries, computed by the C++
    ``sparse_topk_allreduce`` operator (one ``MPI_Allgather`` of (index, value)
    records, then a local sum in rank order).

    Every rank sums the same gathered records in the same order, so all hold identical
    parameters (``consistent``). With ``density=1`` nothing is left behind and the
    scheme is dense data-parallel SGD (up to summation order). The base optimizer sees
    the sparse mean gradient (no momentum correction as in DGC). The ``communication``
    phase includes adding the residual, the selection and the local sum.
    """
    consistent = True

    def __init__(self, base_optimizer, comm=None, density: float = 0.01,
                 comm_dtype: str = "float32", overlap: bool = False):
        super().__init__(base_optimizer, comm, comm_dtype, overlap)
        if not 0.0 < float(density) <= 1.0:
            raise Deep500Error(f"SparseTopKDecentralized on rank {self.rank}: density="
                               f"{density!r}; choose a fraction in (0, 1]")
        self.density = float(density)
        buffer = self.fused().buffer
        # round() first: 0.1 * 1210 is 121.00000000000001 in binary floating point
        self.k = max(1, min(buffer.size, math.ceil(round(self.density * buffer.size, 9))))
        self._k = np.array([self.k], np.int64)
        self._residual = np.zeros_like(buffer)
        self.operator = sparse_topk_operator(buffer.size, buffer.dtype, average=True)
        self._traffic = ring_allgather_traffic(self.k * (INDEX_BYTES + buffer.itemsize),
                                               self.size)

    def scheme_hyperparameters(self) -> dict:
        return {"density": self.density, "k": self.k, "allgather": "cpp-mpi"}

    def step(self, inputs: dict) -> dict:
        outputs, fused, accumulated = self.packed_gradients(inputs)
        with self.phase("communication"):
            accumulated += self._residual
            self.operator.run_forward([accumulated.ctypes.data, self._handle.ctypes.data,
                                       self._k.ctypes.data, self._out.ctypes.data,
                                       self._residual.ctypes.data])
        self._record(SPARSE_COLLECTIVE, "ring allgather", self._traffic)
        self.apply_gradients(fused.unpack(self._out))
        return self._finish_step(inputs, outputs)

    def scheme_measurements(self) -> dict:
        return {"residual_norm": float(np.linalg.norm(self._residual)), "k": self.k}

    def analytic_traffic(self, steps: int) -> dict:
        record = INDEX_BYTES + self.fused().buffer.itemsize
        return {"bytes_sent": steps * self._traffic.bytes_sent,
                "bytes_received": steps * self._traffic.bytes_received,
                "model": f"ring allgather of k={self.k} ({INDEX_BYTES}+"
                         f"{record - INDEX_BYTES} B) records per rank per step: "
                         f"(p-1) x k x {record} B per rank"}
