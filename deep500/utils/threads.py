"""Thread counts: fixed equally for every framework so comparisons are fair, and
recorded with every measurement."""
from __future__ import annotations

import os
import sys


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
