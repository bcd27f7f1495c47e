"""Thread counts: fixed equally for every framework so comparisons are fair, and
recorded with every measurement.

A configuration's count is resolved once (:func:`resolve_threads`) and applied with
:func:`thread_counts`, a context manager that puts the previous counts back, as
``torch.utils.benchmark`` carries ``num_threads`` in its task spec and restores it.
"""
from __future__ import annotations

import contextlib
import os
import sys

_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def usable_cpu_count() -> int:
    """How many CPUs this process may run on (its affinity mask; all CPUs where the
    platform has none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_threads(requested: int | None, ranks: int = 1) -> int:
    """The intra-op thread count of one configuration: ``requested`` where the recipe
    fixes or varies it, else the usable CPUs shared fairly by ``ranks`` processes. The
    one place a default thread count is chosen."""
    if requested is not None:
        threads = int(requested)
        if threads < 1:
            raise ValueError(f"threads must be 1 or more, not {requested!r}")
        return threads
    return max(1, usable_cpu_count() // max(1, int(ranks)))


@contextlib.contextmanager
def thread_counts(threads: int):
    """Run the body with ``threads`` intra-op threads (:func:`set_thread_counts`); on
    exit the environment variables, the BLAS pools and PyTorch's count are put back.
    TensorFlow's counts cannot change once its runtime started: they stay. Yields the
    conditions in force inside."""
    saved_environment = {name: os.environ.get(name) for name in _VARIABLES}
    torch = sys.modules.get("torch")
    saved_torch = torch.get_num_threads() if torch is not None else None
    from threadpoolctl import threadpool_limits
    limiter = threadpool_limits(int(threads))
    try:
        yield set_thread_counts(threads)
    finally:
        limiter.restore_original_limits()
        for name, value in saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if saved_torch is not None:
            torch.set_num_threads(saved_torch)


def set_thread_counts(threads: int) -> dict:
    """Use ``threads`` intra-op threads in NumPy's BLAS, PyTorch and TensorFlow.

    Environment variables are set for libraries loaded later; loaded ones are set
    directly. TensorFlow's counts can only change before its runtime starts; if it has,
    the function leaves them and reports the values in force.
    """
    threads = int(threads)
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(threads)
    from threadpoolctl import threadpool_limits
    threadpool_limits(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:
            pass  # runtime already initialised; the values in force are reported
    return thread_conditions()


def thread_conditions() -> dict:
    """Thread counts in force now, for the conditions of a measurement."""
    conditions = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
    try:
        from threadpoolctl import threadpool_info
        conditions["blas_threads"] = {info.get("internal_api", "?"): info.get("num_threads")
                                      for info in threadpool_info()}
    except ImportError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        conditions["torch_threads"] = torch.get_num_threads()
        conditions["torch_interop_threads"] = torch.get_num_interop_threads()
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "config"):
        conditions["tf_intra_op_threads"] = tf.config.threading.get_intra_op_parallelism_threads()
        conditions["tf_inter_op_threads"] = tf.config.threading.get_inter_op_parallelism_threads()
    return conditions
