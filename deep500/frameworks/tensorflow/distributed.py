"""TensorFlow's own data parallelism, ``tf.distribute.MultiWorkerMirroredStrategy``, as a
Deep500 distributed optimizer: the framework-native baseline that reports compare with
Deep500's schemes and with PyTorch's DDP (``d5pt.PyTorchDistributedDataParallel``).

Both run under the same ``mpirun``: :func:`start_multi_worker_strategy` makes every MPI
rank a TensorFlow worker (task ``rank`` of job ``worker``; each rank picks a free port
on 127.0.0.1, or on its host name when the ranks span hosts, and the addresses travel
over MPI), and :class:`TensorFlowMultiWorkerMirrored` wraps a d5tf Keras optimizer
(``d5tf.GradientDescent``, ``d5tf.MomentumOptimizer``, any ``d5tf.KerasOptimizer``) as
``d5ref.ConsistentDecentralized`` wraps a reference one, with the same measurement face
(:class:`~deep500.lv3_distributed.measured_scheme.MeasuredScheme`), so ``d5.Trainer``
and ``d5.test_training`` drive it unchanged.

What the strategy does (TensorFlow's "Multi-worker training with Keras/custom training
loop" guides; the collectives are TensorFlow's ``CollectiveAllReduce``): variables
created in ``strategy.scope()`` are ``MirroredVariable``s whose initial value is
broadcast from worker 0; inside ``strategy.run`` a Keras optimizer's ``apply``
all-reduces (sums) the gradients of every worker in one batched collective (on the CPU,
the ring of ``CommunicationImplementation.RING`` over gRPC, or what ``AUTO`` picks) and
then every worker applies the same update. Each worker's gradients are scaled by
``1 / workers`` first, so the sum is the mean over workers of the mean-over-batch
gradient: synchronous SGD on the global batch, as DDP and
``d5ref.ConsistentDecentralized`` (Theorem 1).

The network's variables are replaced by mirrored ones (rank 0's values) and the Keras
optimizer is rebuilt in the strategy's scope (:meth:`KerasOptimizer.rebuild`), so the
executor's inference (test accuracy) reads the trained replica.

What is measured, per rank:

* ``phase_times``: ``forward_backward`` (inputs to tensors, the forward pass and
  ``tf.GradientTape``'s gradients in one traced ``strategy.run``, outputs and gradients
  to NumPy) and ``allreduce_update`` (one traced ``strategy.run`` of the Keras
  optimizer's ``apply``: the collective all-reduce of the gradients and the update, as
  Keras runs them; the all-reduce cannot be timed apart from the update without
  leaving Keras' own step). A fused custom training loop runs both in one
  ``tf.function``; here they are two, which costs one more function call per step.
* bytes and messages: **not observable**. TensorFlow's collective ops keep no byte
  counters that Python can read (the ring's gRPC messages pass inside the runtime),
  so nothing is recorded in the ``CommunicationNetwork``'s volume and every epoch's
  ``counted`` says ``not observable``; ``analytic_traffic`` gives the ring's model
  (``2(p-1)/p x n`` per rank for the ``n`` gradient bytes of a step). The initial
  broadcast of the variables is neither measured nor modelled.

TensorFlow 2.21 keeps two more OS threads per collective call for the life of the
process (measured: 114 -> 715 threads over 300 all-reduces on 2 ranks; cf.
tensorflow/tensorflow#76157), so very long runs exhaust the process's threads.

The strategy must be created before TensorFlow runs its first operation in the
process (TensorFlow configures collective ops only at start-up), and only once: it
stays for the life of the process and serves every later baseline with the same
world. ``deep500 run`` creates it before building the executor
(:meth:`TensorFlowMultiWorkerMirrored.set_up_process`); in a script, call
:func:`start_multi_worker_strategy` before ``d5tf.from_onnx``.
"""
from __future__ import annotations

import socket
import time

import numpy as np

from deep500.frameworks._bridge.horovod_baseline import horovod_baseline
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.executor import TensorFlowGraphExecutor
from deep500.frameworks.tensorflow.network import TensorFlowNetwork
from deep500.frameworks.tensorflow.optimizers import KerasOptimizer
from deep500.lv2_training.optimizer import Optimizer, modifies_gradients
from deep500.lv3_distributed.measured_scheme import MeasuredScheme
from deep500.lv3_distributed.volume import ring_allreduce_traffic
from deep500.utils.errors import Deep500Error, UnsupportedError

_clock = time.perf_counter
IMPLEMENTATIONS = {"ring": "RING", "auto": "AUTO"}
NOT_OBSERVABLE = ("not observable: TensorFlow's collective ops (gRPC ring) keep no "
                  "byte counters")

#: The process's strategy and the world it was made for: ``(rank, size,
#: implementation, strategy)``.
_started: tuple | None = None


# -- the strategy -------------------------------------------------------------------------
def _world(comm) -> tuple[int, int, object]:
    """``(rank, size, mpi4py communicator or None)`` of a CommunicationNetwork, an mpi4py
    communicator, or ``None`` (the world under ``mpirun``, else one process)."""
    if comm is None:
        from deep500.lv3_distributed.mpi_launch import launched_by_mpirun
        if not launched_by_mpirun():
            return 0, 1, None
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    mpi = getattr(comm, "comm", comm)
    if not hasattr(mpi, "Get_rank"):
        raise Deep500Error(f"start_multi_worker_strategy: not a communicator: "
                           f"{type(comm).__name__}; pass a d5.CommunicationNetwork, an "
                           f"mpi4py communicator, or None for the MPI world")
    return mpi.Get_rank(), mpi.Get_size(), mpi


def _worker_addresses(mpi, rank: int, size: int) -> list[str]:
    """Every rank's ``host:port``: a port the operating system gives each rank (bound
    and released just before TensorFlow's server binds it), on 127.0.0.1 when every
    rank runs on one host, else on the rank's host name."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    host = socket.gethostname()
    if mpi is None or size == 1:
        return [f"127.0.0.1:{port}"]
    mine = mpi.allgather((host, port))
    local = len({h for h, _ in mine}) == 1
    return [f"{'127.0.0.1' if local else h}:{p}" for h, p in mine]


def _runtime_started() -> bool:
    from tensorflow.python.eager import context
    return context.context()._context_handle is not None


def start_multi_worker_strategy(comm=None, implementation: str = "ring",
                                timeout: float = 300.0):
    """The process's ``tf.distribute.MultiWorkerMirroredStrategy`` over the ranks of an
    MPI communicator (``comm``: a ``d5.CommunicationNetwork``, an mpi4py communicator,
    or ``None`` for the world under ``mpirun``, one process otherwise), made on the
    first call and returned again on later calls with the same world. Collective.

    ``implementation``: the CPU collective, ``"ring"`` (TensorFlow's ring all-reduce
    over gRPC) or ``"auto"`` (TensorFlow's choice); ``timeout``: seconds a collective
    may wait for its peers before it fails (instead of hanging).
    """
    global _started
    key = implementation.lower() if isinstance(implementation, str) else implementation
    if key not in IMPLEMENTATIONS:
        raise Deep500Error(f"MultiWorkerMirroredStrategy: unknown implementation "
                           f"{implementation!r}; use one of {sorted(IMPLEMENTATIONS)}")
    rank, size, mpi = _world(comm)
    if _started is not None:
        if _started[:3] != (rank, size, key):
            raise Deep500Error(
                f"rank {rank} of {size}: this process already runs a "
                f"MultiWorkerMirroredStrategy as rank {_started[0]} of {_started[1]} with "
                f"implementation '{_started[2]}'; TensorFlow allows one per process. "
                f"Run this configuration in a process of its own (a separate "
                f"'deep500 run')")
        return _started[3]
    if _runtime_started():
        raise Deep500Error(
            f"rank {rank} of {size}: TensorFlow has already run operations in this "
            f"process, so MultiWorkerMirroredStrategy can no longer configure its "
            f"collective ops (TensorFlow allows that only at start-up). Call "
            f"d5tf.start_multi_worker_strategy() before d5tf.from_onnx or any other "
            f"TensorFlow work, or run the TensorFlow baseline before TensorFlow "
            f"configurations of the same recipe")
    workers = _worker_addresses(mpi, rank, size)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": workers}), task_type="worker", task_id=rank,
        rpc_layer="grpc")
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=getattr(tf.distribute.experimental.CommunicationImplementation,
                               IMPLEMENTATIONS[key]),
        timeout_seconds=float(timeout))
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options)
    except (RuntimeError, ValueError, tf.errors.OpError) as exc:
        raise Deep500Error(f"rank {rank} of {size}: MultiWorkerMirroredStrategy did not "
                           f"start with workers {workers}: {exc}") from None
    _started = (rank, size, key, strategy)
    return strategy


# -- the optimizer ----------------------------------------------------------------------
class TensorFlowMultiWorkerMirrored(MeasuredScheme, Optimizer):
    """A d5tf Keras optimizer trained data-parallel by TensorFlow's
    ``MultiWorkerMirroredStrategy`` on the CPU (see the module docstring for what is
    measured).

    Args:
        base_optimizer: a ``d5tf.KerasOptimizer`` (``d5tf.GradientDescent``,
            ``d5tf.MomentumOptimizer``, ...) over this rank's ``d5tf.from_onnx``
            executor; it is rebuilt in the strategy's scope over mirrored variables.
        comm: a ``d5.CommunicationNetwork``, an mpi4py communicator, or ``None`` for
            the MPI world (MPI gives the ranks to TensorFlow).
        implementation: the CPU collective, ``"ring"`` or ``"auto"``.
        timeout: seconds a collective may wait for its peers.

    Construction is collective: the mirrored variables take rank 0's values.
    """
    phases = ("forward_backward", "allreduce_update")
    consistent = True

    def __init__(self, base_optimizer: KerasOptimizer, comm=None,
                 implementation: str = "ring", timeout: float = 300.0):
        _check_base(base_optimizer)
        super().__init__(base_optimizer.executor, base_optimizer.loss)
        self.base = base_optimizer
        self.events = base_optimizer.events
        self._start_measuring(comm)
        self.implementation = str(implementation).lower()
        self.timeout = float(timeout)
        self.strategy = start_multi_worker_strategy(self.comm, self.implementation,
                                                    self.timeout)
        network = self.network
        network.plan   # the stored layouts are fixed before the variables are mirrored
        with self.strategy.scope():
            for name, variable in list(network.variables.items()):
                network.variables[name] = tf.Variable(
                    variable.read_value(), trainable=variable.trainable,
                    name=variable.name.split(":")[0])
            network.set_plan(network.plan)
            base_optimizer.rebuild()
        self._version = network.version
        self.parameter_names = network.get_params()
        self._variables = [network.variables[n] for n in self.parameter_names]
        self._gradient_bytes = sum(int(np.prod(v.shape)) * v.dtype.size
                                   for v in self._variables)
        self._steps: dict = {}
        self._update = None
        self.restart_epoch()

    @classmethod
    def check_options(cls, implementation: str = "ring", timeout: float = 300.0) -> None:
        if str(implementation).lower() not in IMPLEMENTATIONS:
            raise Deep500Error(f"implementation: {implementation!r} is not a CPU "
                               f"collective of MultiWorkerMirroredStrategy; use one of "
                               f"{sorted(IMPLEMENTATIONS)}")

    @classmethod
    def set_up_process(cls, comm, implementation: str = "ring",
                       timeout: float = 300.0) -> None:
        """What must happen before TensorFlow runs in this process: the strategy.
        Collective."""
        start_multi_worker_strategy(comm, implementation, timeout)

    def scheme_hyperparameters(self) -> dict:
        return {"strategy": "MultiWorkerMirroredStrategy",
                "implementation": self.implementation,
                "workers": self.strategy.num_replicas_in_sync}

    # -- a step -------------------------------------------------------------------------
    def step(self, inputs: dict) -> dict:
        self._before_step(inputs)
        executor = self.executor
        executor._check_inputs(inputs)
        if self.network.version != self._version:
            raise Deep500Error(f"rank {self.rank}: network '{self.network.name}' changed "
                               f"after {type(self).__name__} mirrored its variables; "
                               f"build a new one after editing the graph")
        for event in executor.events:
            event.before_executor(inputs)
        with self.phase("forward_backward"):
            feeds, frozen = executor._feeds(inputs, self.network.plan.static_inputs)
            outputs, grads = self._forward_backward(frozen)(feeds)
            result = executor._finish(outputs, grads)
        for event in executor.events:
            event.after_backprop(result)
        self._check_loss(result)
        with self.phase("allreduce_update"):
            self._allreduce_update()(grads)
        self.base.step_count += 1
        self.step_count += 1
        self._after_step(inputs, result)
        return result

    def _forward_backward(self, frozen: dict):
        """``feeds -> (outputs, gradients / workers)`` traced in ``strategy.run``, one
        function per value of the shape-deciding inputs."""
        key = tuple(sorted(frozen.items()))
        function = self._steps.get(key)
        if function is None:
            executor, strategy, loss = self.executor, self.strategy, self.loss
            scale = 1.0 / strategy.num_replicas_in_sync

            def replica(feeds):
                outputs, grads = executor._forward_backward(feeds, frozen, loss)
                return outputs, [g * tf.cast(scale, g.dtype) for g in grads]

            def run(feeds):
                per_replica = strategy.run(replica, args=(feeds,))
                return tf.nest.map_structure(
                    lambda v: strategy.experimental_local_results(v)[0], per_replica)

            function = self._steps[key] = tf.function(run)
        return function

    def _allreduce_update(self):
        """``gradients -> None``: the Keras optimizer's ``apply`` in ``strategy.run``,
        which sums the workers' gradients by the strategy's collective and updates."""
        if self._update is None:
            strategy, variables = self.strategy, self._variables
            keras_optimizer = self.base.keras_optimizer

            def replica(grads):
                keras_optimizer.apply([tf.identity(g) for g in grads], variables)

            self._update = tf.function(lambda grads: strategy.run(replica,
                                                                  args=(grads,)))
        return self._update

    # -- traffic ------------------------------------------------------------------------
    def scheme_measurements(self) -> dict:
        return {"counted": NOT_OBSERVABLE, "gradient_bytes": self._gradient_bytes}

    def analytic_traffic(self, steps: int) -> dict:
        """The textbook ring all-reduce (Patarasuk & Yuan, JPDC 2009) of a step's
        gradients, ``2(p-1)/p x n`` per rank, one batched collective per dtype."""
        counts: dict = {}
        for variable in self._variables:
            itemsize = variable.dtype.size
            counts[itemsize] = counts.get(itemsize, 0) + int(np.prod(variable.shape))
        sent = received = 0
        for itemsize, count in counts.items():
            one = ring_allreduce_traffic(count, itemsize, self.size, self.rank)
            sent, received = sent + one.bytes_sent, received + one.bytes_received
        return {"bytes_sent": steps * sent, "bytes_received": steps * received,
                "model": f"ring all-reduce of the step's {self._gradient_bytes} B of "
                         f"gradients (batched): 2(p-1)/p x n per rank"}


def _check_base(base_optimizer) -> None:
    if not isinstance(base_optimizer, KerasOptimizer):
        raise Deep500Error(
            f"TensorFlowMultiWorkerMirrored wraps a d5tf optimizer (d5tf.GradientDescent, "
            f"d5tf.MomentumOptimizer, any d5tf.KerasOptimizer) over a d5tf.from_onnx "
            f"executor; got {type(base_optimizer).__name__}. Deep500's own schemes "
            f"(d5ref.ConsistentDecentralized, ...) wrap three-step optimizers")
    executor = base_optimizer.executor
    if not isinstance(executor, TensorFlowGraphExecutor) or \
            not isinstance(executor.network, TensorFlowNetwork):
        raise UnsupportedError(f"TensorFlowMultiWorkerMirrored runs an ONNX model "
                               f"(d5tf.from_onnx); got a {type(executor).__name__}")
    if executor.operator_events:
        raise UnsupportedError("Per-operator events cannot run inside the strategy's "
                               "traced step; time operators on one process")
    if executor.device.is_gpu:
        raise UnsupportedError(f"TensorFlowMultiWorkerMirrored is the CPU baseline; the "
                               f"executor runs on {executor.device}")
    if base_optimizer.events and any(modifies_gradients(e) for e in base_optimizer.events):
        raise UnsupportedError("TensorFlowMultiWorkerMirrored applies Keras' own update "
                               "inside the strategy; gradient modifiers cannot run there")


#: The baselines of this framework by the name a recipe gives
#: (``{framework: tensorflow, scheme: MultiWorkerMirroredStrategy}``).
BASELINES = {"MultiWorkerMirroredStrategy": TensorFlowMultiWorkerMirrored,
             "TensorFlowMultiWorkerMirrored": TensorFlowMultiWorkerMirrored,
             "Horovod": horovod_baseline("tensorflow")}

__all__ = ["BASELINES", "TensorFlowMultiWorkerMirrored", "start_multi_worker_strategy"]
