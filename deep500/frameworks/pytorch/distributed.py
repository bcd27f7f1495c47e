"""PyTorch's own data parallelism, ``torch.nn.parallel.DistributedDataParallel`` over the
gloo backend, as a Deep500 distributed optimizer: the framework-native baseline that
reports compare with Deep500's schemes (e.g. ``d5ref.ConsistentDecentralized``).

Both run under the same ``mpirun``: :func:`init_torch_distributed` starts
``torch.distributed`` on the ranks of the MPI world (rank and size from MPI, the
rendezvous address and port agreed over MPI), and
:class:`PyTorchDistributedDataParallel` wraps a d5pt optimizer (``d5pt.GradientDescent``,
``d5pt.MomentumOptimizer``, any ``d5pt.TorchOptimizer``) as
``d5ref.ConsistentDecentralized`` wraps a reference one. It shows the same measurement
face (:class:`~deep500.lv3_distributed.measured_scheme.MeasuredScheme`): ``comm``,
``rank``, ``size``, ``phase_times``, ``end_epoch()``, ``analytic_traffic(steps)``,
``distributed_summary(statistics)``; so ``d5.Trainer`` and ``d5.test_training`` drive it
unchanged.

What DDP does in a step (Li et al., "PyTorch Distributed: Experiences on Accelerating
Data Parallel Training", VLDB 2020): the forward pass runs the local replica; during
backpropagation, autograd hooks copy each gradient into a bucket (about
``bucket_cap_mb`` each, filled in the order gradients become ready, divided by the
world size) and start an asynchronous allreduce of a bucket as soon as it is full, so
communication overlaps the rest of backpropagation; ``backward()`` returns once every
bucket is reduced and copied back into ``.grad``. Then every rank takes the same
optimizer step. With the loss a mean over the minibatch and ``d5.DistributedSampler``
shards, this is synchronous SGD on the global batch (Theorem 1, as for
``d5ref.ConsistentDecentralized``).

What is measured, per rank:

* ``phase_times``: ``forward`` (inputs to tensors, the forward pass through DDP),
  ``backward_allreduce`` (backpropagation with the overlapped bucket allreduces, until
  the averaged gradients are in ``.grad``: overlapped communication cannot be
  separated from computation by clocks), ``update`` (outputs and gradients to NumPy,
  gradient modifiers, ``torch_optimizer.step()``). DDP's own timers (sampled by its
  logger) are reported in ``scheme_measurements()["ddp_runtime_stats"]``, among them
  the time from the first bucket's allreduce to the last one's end.
* bytes and messages: gloo's traffic is not visible to Deep500, so each step records
  the volume of gloo's ring allreduce of each of DDP's buckets (entry
  ``allreduce:gloo``, counted ``modelled (gloo ring)``; see
  :mod:`deep500.frameworks.pytorch.gloo_traffic`), with the bucket sizes read from
  DDP's reducer. DDP's initial broadcast of rank 0's parameters is recorded as
  ``broadcast:gloo`` but not in the first epoch. DDP's small metadata exchanges
  (parameter shapes at construction, the rebuilt bucket order once) are not counted.
"""
from __future__ import annotations

import inspect
import os
from datetime import timedelta

from deep500.frameworks._bridge.horovod_baseline import horovod_baseline
from deep500.frameworks.pytorch.executor import PyTorchGraphExecutor
from deep500.frameworks.pytorch.gloo_traffic import (gloo_broadcast_traffic,
                                                     gloo_ring_allreduce_traffic)
from deep500.frameworks.pytorch.network import to_numpy
from deep500.frameworks.pytorch.optimizers import TorchOptimizer
from deep500.lv2_training.optimizer import Optimizer, modifies_gradients
from deep500.lv3_distributed.measured_scheme import MeasuredScheme
from deep500.lv3_distributed.volume import modelled, ring_allreduce_traffic
from deep500.utils.errors import Deep500Error, UnsupportedError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")

GLOO_RING = modelled("gloo ring")
GLOO_BINOMIAL = modelled("gloo binomial tree")
#: DDP's ``broadcast_bucket_size`` for the initial parameter broadcast.
_DDP_BROADCAST_BUCKET_BYTES = 250 * 1024 * 1024


# -- starting torch.distributed from MPI ----------------------------------------------
def _torch_distributed():
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        raise UnsupportedError(f"This PyTorch ({torch.__version__}) was built without "
                               f"torch.distributed, which PyTorchDistributedDataParallel "
                               f"needs; install a PyTorch build with distributed support "
                               f"(the pip wheels have it)")
    if not dist.is_gloo_available():
        raise UnsupportedError(f"This PyTorch ({torch.__version__}) has torch.distributed "
                               f"without the gloo backend; install a build with gloo "
                               f"(the pip wheels for Linux and macOS have it)")
    return dist


def _mpi_world(comm):
    """``(rank, size, mpi4py communicator or None)``; ``comm=None`` is the MPI world
    under ``mpirun``, else one process without MPI."""
    if comm is None:
        from deep500.lv3_distributed.mpi_launch import launched_by_mpirun
        if not launched_by_mpirun():
            return 0, 1, None
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    mpi = getattr(comm, "comm", comm)   # a CommunicationNetwork's raw communicator
    if not hasattr(mpi, "Get_rank"):
        raise Deep500Error(f"init_torch_distributed: not a communicator: "
                           f"{type(comm).__name__}; pass a d5.CommunicationNetwork, an "
                           f"mpi4py communicator, or None for the MPI world")
    return mpi.Get_rank(), mpi.Get_size(), mpi


def _rendezvous_host(mpi, size: int) -> str:
    """The loopback address when every rank runs on one host, else rank 0's host name
    (``MASTER_ADDR``, if set, wins)."""
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    if mpi is None or size == 1:
        return "127.0.0.1"
    from mpi4py import MPI
    hosts = mpi.allgather(MPI.Get_processor_name())
    return "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]


def _check_running(dist, rank: int, size: int) -> tuple[int, int]:
    backend = str(dist.get_backend())
    if (dist.get_rank(), dist.get_world_size()) != (rank, size) or backend != "gloo":
        raise Deep500Error(
            f"rank {rank} of {size}: torch.distributed is already running as rank "
            f"{dist.get_rank()} of {dist.get_world_size()} with backend '{backend}'; "
            f"Deep500's PyTorch baseline needs gloo with MPI's ranks. Call "
            f"torch.distributed.destroy_process_group() first, or start it with "
            f"d5pt.init_torch_distributed")
    return rank, size


def init_torch_distributed(comm=None, timeout: float = 60.0,
                           address: str | None = None) -> tuple[int, int]:
    """Start ``torch.distributed`` with the gloo backend on the ranks of an MPI
    communicator (``comm``: a ``d5.CommunicationNetwork``, an mpi4py communicator, or
    ``None`` for the world under ``mpirun``, one process otherwise); returns ``(rank,
    size)``. Collective. Calling it again is a no-op when torch.distributed already
    runs gloo with the same rank and size, and an error otherwise.

    Rank and size are MPI's. Rank 0 starts torch's ``TCPStore`` on ``address`` (default:
    ``MASTER_ADDR`` if set, else 127.0.0.1 when every rank is on one host, else rank
    0's host name) and a port the operating system picks, so no port is guessed and
    none can be taken in between; the port travels to the other ranks over MPI (raw
    bookkeeping, not counted). Then every rank joins ``init_process_group("gloo",
    store=..., rank, world_size, timeout)``; gloo picks its network interface itself
    (``GLOO_SOCKET_IFNAME`` overrides). Failures on any rank (a store that cannot start
    or be reached, a rendezvous that runs past ``timeout`` seconds) raise
    :class:`Deep500Error` on every rank, naming the ranks and the reason.
    """
    dist = _torch_distributed()
    rank, size, mpi = _mpi_world(comm)
    if dist.is_initialized():
        return _check_running(dist, rank, size)
    host = address or _rendezvous_host(mpi, size)
    wait = timedelta(seconds=float(timeout))
    store, port, problem = None, 0, None
    if rank == 0:
        try:
            store = dist.TCPStore(host, 0, size, True, timeout=wait,
                                  wait_for_workers=False)
            port = store.port
        except (RuntimeError, OSError, ValueError) as exc:
            problem = str(exc)
    if mpi is not None and size > 1:
        port, problem = mpi.bcast((port, problem), root=0)
    if problem is not None:
        raise Deep500Error(f"rank {rank} of {size}: rank 0 could not start "
                           f"torch.distributed's rendezvous store on {host}: {problem}. "
                           f"Pass address= (or set MASTER_ADDR) to an address of rank "
                           f"0's host that every rank can reach")
    error = _join(dist, rank, size, host, port, wait, store)
    failures = [error] if mpi is None or size == 1 else mpi.allgather(error)
    failed = [(r, message) for r, message in enumerate(failures) if message]
    if failed:
        if dist.is_initialized():
            dist.destroy_process_group()
        reasons = "; ".join(f"rank {r}: {message}" for r, message in failed)
        raise Deep500Error(
            f"rank {rank} of {size}: torch.distributed (gloo) did not start at "
            f"tcp://{host}:{port} within {timeout:g} s ({reasons}). Check that every "
            f"rank reaches rank 0's host (address=, MASTER_ADDR), that gloo uses a "
            f"reachable interface (GLOO_SOCKET_IFNAME), or raise timeout")
    return rank, size


def _join(dist, rank: int, size: int, host: str, port: int, wait: timedelta,
          store=None) -> str | None:
    """Connect to the store (unless this rank holds it) and start the gloo process
    group; the reason if that failed, else ``None``."""
    try:
        if store is None:
            store = dist.TCPStore(host, port, size, False, timeout=wait)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=size,
                                timeout=wait)
    except (RuntimeError, OSError, ValueError, TimeoutError) as exc:
        # torch's DistError family (DistStoreError, DistNetworkError) are RuntimeErrors
        message = str(exc).strip()
        return f"{type(exc).__name__}: {message.splitlines()[0] if message else '-'}"
    return None


# -- the optimizer ----------------------------------------------------------------------
class PyTorchDistributedDataParallel(MeasuredScheme, Optimizer):
    """A d5pt optimizer trained data-parallel by PyTorch's ``DistributedDataParallel``
    over gloo on the CPU (see the module docstring for what is measured).

    Args:
        base_optimizer: a ``d5pt.TorchOptimizer`` (``d5pt.GradientDescent``,
            ``d5pt.MomentumOptimizer``, ...) over this rank's ``d5pt.from_onnx``
            executor; its ``torch_optimizer`` takes the steps, its hyper-parameters
            and state stay there.
        comm: a ``d5.CommunicationNetwork``, an mpi4py communicator, or ``None`` for
            the MPI world (where the modelled traffic is recorded; MPI also gives the
            ranks to torch.distributed).
        bucket_cap_mb: DDP's bucket size (DDP's first bucket is 1 MiB regardless).
        find_unused_parameters: DDP's option for networks whose loss does not reach
            every parameter (costs one more small allreduce per step).
        gradient_as_bucket_view: DDP's option: ``.grad`` are views into the buckets
            (saves a copy; the gradient arrays a step returns then change with the
            next step).
        init_timeout: seconds for starting torch.distributed, and gloo's timeout for
            each collective.

    Construction is collective: DDP broadcasts rank 0's parameters to every rank.
    Inference through the executor (evaluation) runs the same module, without DDP.
    """
    phases = ("forward", "backward_allreduce", "update")
    consistent = True

    def __init__(self, base_optimizer: TorchOptimizer, comm=None,
                 bucket_cap_mb: float = 25.0, find_unused_parameters: bool = False,
                 gradient_as_bucket_view: bool = False, init_timeout: float = 60.0):
        _check_base(base_optimizer)
        super().__init__(base_optimizer.executor, base_optimizer.loss)
        self.base = base_optimizer
        self.events = base_optimizer.events       # one list: the trainer adds events here
        self._start_measuring(comm)
        self.parameter_names = list(self.network.parameter_values)
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        init_torch_distributed(self.comm, timeout=init_timeout)
        module = self.network.module
        options = {"bucket_cap_mb": self.bucket_cap_mb,
                   "find_unused_parameters": self.find_unused_parameters,
                   "gradient_as_bucket_view": self.gradient_as_bucket_view}
        # ONNX constants (the module's buffers) never change: no broadcast per forward.
        ddp_class = torch.nn.parallel.DistributedDataParallel
        if "forward_sync_buffers" in inspect.signature(ddp_class).parameters:
            options["forward_sync_buffers"] = False
            synced = list(module.parameters()) + list(module.buffers())
        else:
            options["broadcast_buffers"] = False
            synced = list(module.parameters())
        try:
            self.ddp = ddp_class(module, **options)
        except RuntimeError as exc:
            raise Deep500Error(f"rank {self.rank} of {self.size}: "
                               f"DistributedDataParallel could not wrap network "
                               f"'{self.network.name}': {exc}") from None
        self._record_initial_broadcast(synced)
        self._parameter_count = len(self.parameter_names)
        self._buckets = self._bucket_layout()
        self._rebuilt = False
        self.restart_epoch()

    def scheme_hyperparameters(self) -> dict:
        return {"backend": "gloo", "bucket_cap_mb": self.bucket_cap_mb,
                "find_unused_parameters": self.find_unused_parameters,
                "gradient_as_bucket_view": self.gradient_as_bucket_view}

    # -- a step -------------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        self._before_step(inputs)
        executor, network = self.executor, self.network
        executor._check_inputs(inputs)
        self._check_parameters()
        for event in executor.events:
            event.before_executor(inputs)
        # self.phase: the phase times, and the timeline's events while one records
        with self.phase("forward"), torch.enable_grad():
            tensors = {name: executor._to_tensor(value) for name, value in inputs.items()}
            executor._clear_gradients()
            outputs = self.ddp(**tensors)
            loss = outputs.get(self.loss)
            if loss is None:
                raise executor._unknown_y(self.loss)
            executor._check_loss(self.loss, loss)
        with self.phase("backward_allreduce"), torch.enable_grad():
            loss.backward()
        with self.phase("update"):
            result = {name: to_numpy(value) for name, value in outputs.items()}
            network.last_values = {**inputs, **result}
            result = executor._gradients(result)
            for event in executor.events:
                event.after_backprop(result)
            self._check_loss(result)
            if self.events and any(modifies_gradients(e) for e in self.events):
                self.base._modify_torch_gradients(result)  # on the averaged gradients
            self.base.torch_optimizer.step()
            self.base.step_count += 1
        self._record_step_traffic()
        self.step_count += 1
        self._after_step(inputs, result)
        return result

    def _check_parameters(self) -> None:
        network = self.network
        if getattr(network, "needs_build", False):
            network.build_if_needed()
        if len(network.parameter_values) != self._parameter_count:
            raise Deep500Error(f"rank {self.rank}: network '{network.name}' now has "
                               f"{len(network.parameter_values)} parameters, but "
                               f"DistributedDataParallel wrapped "
                               f"{self._parameter_count}; build a new "
                               f"{type(self).__name__} after editing the graph")

    # -- traffic ------------------------------------------------------------------------
    def _bucket_layout(self) -> list[tuple[int, int]]:
        """``[(elements, itemsize)]`` of DDP's current gradient buckets, read from its
        reducer; if this torch does not expose them, one bucket per dtype."""
        try:
            buckets = self.ddp.reducer._get_zeros_like_grad_buckets()
            layout = [(b.buffer().numel(), b.buffer().element_size()) for b in buckets]
            if layout:
                return layout
        except (AttributeError, RuntimeError):
            pass
        sizes: dict = {}
        for parameter in self.network.parameter_values.values():
            key = parameter.element_size()
            sizes[key] = sizes.get(key, 0) + parameter.numel()
        return [(count, itemsize) for itemsize, count in sizes.items()]

    def _record_step_traffic(self) -> None:
        # DDP rebuilds its buckets once, in the order gradients became ready, before
        # the second step's forward pass; that step already reduces the new buckets.
        if not self._rebuilt and getattr(self.ddp, "_has_rebuilt_buckets", False):
            self._buckets, self._rebuilt = self._bucket_layout(), True
        volume, rank, size = self.comm.volume, self.rank, self.size
        buckets = self._buckets
        if self.find_unused_parameters:   # the int32 map of parameters used this step
            buckets = buckets + [(self._parameter_count, 4)]
        for count, itemsize in buckets:
            volume.record_traffic("allreduce", "gloo", GLOO_RING,
                                  gloo_ring_allreduce_traffic(count, itemsize, size, rank))

    def _record_initial_broadcast(self, tensors: list) -> None:
        """DDP's ``_sync_module_states``: ``broadcast_coalesced`` from rank 0, one
        gloo broadcast per group of same-dtype tensors of up to 250 MiB."""
        groups: dict = {}
        for tensor in tensors:
            nbytes = tensor.numel() * tensor.element_size()
            groups.setdefault(tensor.dtype, []).append(nbytes)
        for sizes in groups.values():
            pending = 0
            for nbytes in sizes:
                pending += nbytes
                if pending >= _DDP_BROADCAST_BUCKET_BYTES:
                    self._record_broadcast(pending)
                    pending = 0
            if pending:
                self._record_broadcast(pending)

    def _record_broadcast(self, nbytes: int) -> None:
        traffic = gloo_broadcast_traffic(nbytes, self.size, self.rank)
        self.comm.volume.record_traffic("broadcast", "gloo", GLOO_BINOMIAL, traffic)

    def analytic_traffic(self, steps: int) -> dict:
        """The textbook ring allreduce (Patarasuk & Yuan, JPDC 2009) of each of DDP's
        buckets per step, ``2(p-1)/p x n`` per rank (gloo's segmented ring matches it
        when its segments divide the bucket evenly)."""
        sent = received = 0
        for count, itemsize in self._buckets:
            one = ring_allreduce_traffic(count, itemsize, self.size, self.rank)
            sent, received = sent + one.bytes_sent, received + one.bytes_received
        total = sum(count * itemsize for count, itemsize in self._buckets)
        return {"bytes_sent": steps * sent, "bytes_received": steps * received,
                "model": f"ring allreduce of DDP's {len(self._buckets)} gradient "
                         f"bucket(s), {total} B per step: 2(p-1)/p x n per rank"}

    # -- measurements -------------------------------------------------------------------
    def scheme_measurements(self) -> dict:
        return {"bucket_bytes": [count * itemsize for count, itemsize in self._buckets],
                "ddp_runtime_stats": self.ddp_runtime_stats()}

    def ddp_runtime_stats(self) -> dict:
        """DDP's own timers in seconds, averaged by its logger over the iterations it
        samples (the first few and then every 100th, over the whole run): forward
        computation, backward computation, backward communication (from the first
        bucket's allreduce to the last one's end) and their overlap. ``{}`` where this
        torch does not expose them."""
        try:
            data = self.ddp._get_ddp_logging_data()
        except (AttributeError, RuntimeError):
            return {}
        keys = ("avg_forward_compute_time", "avg_backward_compute_time",
                "avg_backward_comm_time", "avg_backward_compute_comm_overlap_time")
        return {key[4:]: data[key] / 1e9 for key in keys if key in data}


def _check_base(base_optimizer) -> None:
    if not isinstance(base_optimizer, TorchOptimizer):
        raise Deep500Error(
            f"PyTorchDistributedDataParallel wraps a d5pt optimizer "
            f"(d5pt.GradientDescent, d5pt.MomentumOptimizer, any d5pt.TorchOptimizer) "
            f"over a d5pt.from_onnx executor; got {type(base_optimizer).__name__}. "
            f"Deep500's own schemes (d5ref.ConsistentDecentralized, ...) wrap three-step "
            f"optimizers")
    executor = base_optimizer.executor
    if not isinstance(executor, PyTorchGraphExecutor):
        raise UnsupportedError(f"PyTorchDistributedDataParallel runs an ONNX model "
                               f"(d5pt.from_onnx); got a {type(executor).__name__}")
    if executor.compile:
        raise UnsupportedError("PyTorchDistributedDataParallel runs the module eagerly; "
                               "build the executor with compile=False")
    if executor.operator_events:
        raise UnsupportedError("Per-operator events cannot run inside "
                               "DistributedDataParallel; time operators on one process")
    if executor._torch_device.type != "cpu":
        raise UnsupportedError(f"PyTorchDistributedDataParallel is the gloo baseline on "
                               f"the CPU; the executor runs on {executor.device}")


#: The baselines of this framework by the name a recipe gives
#: (``{framework: pytorch, scheme: DistributedDataParallel}``).
BASELINES = {"DistributedDataParallel": PyTorchDistributedDataParallel,
             "PyTorchDistributedDataParallel": PyTorchDistributedDataParallel,
             "Horovod": horovod_baseline("pytorch")}

__all__ = ["BASELINES", "PyTorchDistributedDataParallel", "init_torch_distributed"]
