"""Layer-wise overlap of the gradient allreduce with backprop (``overlap=True``).

* Under ``mpirun -np 2``: ``ConsistentDecentralized(algorithm="mpi", overlap=True)``
  and ``algorithm="ring"`` (Deep500's non-blocking ring)
  take the same steps, bit for bit, as the blocking scheme (ring and MPI allreduce),
  on the reference and on the PyTorch executor, with buckets small enough that a step
  starts several ``MPI_Iallreduce``; its measurements hold ``exposed_communication``.
* One process: the reference executor reports each gradient once, complete, after the
  backward of the first node that reads it; ``GradientBuckets`` forms buckets in
  arrival order.
* Bad input (a scheme or executor that cannot overlap, a blocking algorithm, a bad
  bucket size, gradient modifiers) is a ``Deep500Error`` that says what to change.
"""
import json
import time

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.frameworks.reference.distributed import SCHEMES
from deep500.lv1_network.network import gradient_name
from deep500.lv3_distributed.gradient_buckets import GradientBuckets
from deep500.utils.errors import Deep500Error
from tests.lv3_distributed.mpi_helpers import mpirun

import importlib
import sys

from tests.lv3_distributed.mpi_helpers import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
small_model = importlib.import_module("check_schemes").small_model
sys.path.remove(str(SCRIPTS))

OVERLAP = {"algorithm": "mpi", "overlap": True, "bucket_bytes": 512}


def train(tmp_path, label, executor="reference", model="mlp", ranks=2,
          scheme="ConsistentDecentralized", **options):
    out = tmp_path / label
    out.mkdir()
    status, output, _ = mpirun(ranks, "overlap_train.py", out, "--executor", executor,
                               "--model", model, "--options", json.dumps(options),
                               "--scheme", scheme, timeout=180)
    assert status == 0, output[-4000:]
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]
    params = [dict(np.load(out / f"rank{r}.npz")) for r in range(ranks)]
    return results, params


@pytest.mark.parametrize("executor", ["reference", "pytorch"])
def test_overlapped_steps_equal_blocking_bit_for_bit(tmp_path, executor):
    if executor == "pytorch":
        pytest.importorskip("torch")
    ring, ring_params = train(tmp_path, "ring", executor)
    mpi, _ = train(tmp_path, "mpi", executor, algorithm="mpi")
    overlapped, params = train(tmp_path, "overlap", executor, **OVERLAP)
    for results in (ring, mpi, overlapped):
        assert results[0]["steps"] == results[1]["steps"]   # ranks agree every step
    assert overlapped[0]["steps"] == ring[0]["steps"] == mpi[0]["steps"]
    for name, value in ring_params[0].items():
        assert_array_equal(params[0][name], value, err_msg=name)
    measured = overlapped[0]["measured"]
    assert measured["overlap"] is True and measured["buckets"] >= 2
    assert np.isfinite(measured["exposed_communication"])
    assert measured["step_seconds_median"] > 0 < measured["compute_only_seconds_median"]
    assert "exposed_communication" in ring[0]["measured"]
    assert overlapped[0]["hyperparameters"]["bucket_bytes"] == 512


def test_deep500s_non_blocking_ring_overlaps_bit_for_bit(tmp_path):
    ring, ring_params = train(tmp_path, "ring")
    for progress in ("calls", "thread"):
        overlapped, params = train(tmp_path, f"ring-overlap-{progress}", algorithm="ring",
                                   overlap=True, bucket_bytes=512, progress=progress)
        assert overlapped[0]["steps"] == ring[0]["steps"], progress
        for name, value in ring_params[0].items():
            assert_array_equal(params[0][name], value, err_msg=f"{name} ({progress})")
        measured = overlapped[0]["measured"]
        assert measured["overlap"] is True and measured["buckets"] >= 2
        assert overlapped[0]["hyperparameters"]["allreduce"] == "ring"
    assert overlapped[0]["hyperparameters"]["progress"] == "thread"


def test_deep500s_non_blocking_ring_overlaps_with_bfloat16_on_the_wire(tmp_path):
    """Buckets move which rank's values a narrowing rounds, so the overlapped step is not
    the blocking one bit for bit; the ranks agree exactly, and the parameters stay
    within the rounding of the wire: each step's averaged gradient element differs by
    at most one bfloat16 rounding of one rank's value and one of the sum (2 x 2^-8
    relative), times the learning rate, over the few steps of the run."""
    blocking, blocking_params = train(tmp_path, "ring-bf16", algorithm="ring",
                                      comm_dtype="bfloat16")
    overlapped, params = train(tmp_path, "ring-bf16-overlap", algorithm="ring",
                               comm_dtype="bfloat16", overlap=True, bucket_bytes=512)
    assert overlapped[0]["steps"] == overlapped[1]["steps"]   # ranks agree every step
    assert len(overlapped[0]["steps"]) == len(blocking[0]["steps"])
    measured = overlapped[0]["measured"]
    assert measured["overlap"] is True and measured["buckets"] >= 2
    for name, value in blocking_params[0].items():
        scale = float(np.max(np.abs(value))) + 1e-12
        np.testing.assert_allclose(params[0][name], value, rtol=0, atol=2e-2 * scale,
                                   err_msg=name)


def test_overlap_on_a_convolutional_network_with_pytorch(tmp_path):
    pytest.importorskip("torch")
    blocking, blocking_params = train(tmp_path, "lenet", "pytorch", "lenet")
    overlapped, params = train(tmp_path, "lenet-overlap", "pytorch", "lenet",
                               algorithm="mpi", overlap=True, bucket_bytes=4096)
    assert overlapped[0]["steps"] == blocking[0]["steps"]
    assert overlapped[0]["measured"]["buckets"] >= 3
    for name, value in blocking_params[0].items():
        assert_array_equal(params[0][name], value, err_msg=name)


# -- one process ----------------------------------------------------------------------
class _Recorder(GradientBuckets):
    """Records what the executor reports instead of communicating."""
    def __init__(self):
        self.wants_gradients = True
        self.reported = []
        self.progress = 0

    def gradient_ready(self, name, gradient):
        self.reported.append((name, np.array(gradient)))

    def backward_progress(self):
        self.progress += 1


def _inputs(batch=4):
    rng = np.random.default_rng(0)
    return {"input": rng.standard_normal((batch, 1, 8, 8)).astype(np.float32),
            "labels": rng.integers(0, 10, batch).astype(np.int64)}


@pytest.mark.parametrize("executor", ["reference", "pytorch"])
def test_executors_report_each_complete_gradient_in_reverse_layer_order(executor):
    if executor == "reference":
        run = d5ref.from_onnx(small_model())
    else:
        d5pt = pytest.importorskip("deep500.frameworks.pytorch")
        run = d5pt.from_onnx(small_model())
    recorder = _Recorder()
    run.events.append(recorder)
    outputs = run.inference_and_backprop(_inputs(), "loss")
    names = [name for name, _ in recorder.reported]
    params = run.network.get_params()
    assert sorted(names) == sorted(params)          # each once
    assert recorder.progress >= len(params)
    for name, gradient in recorder.reported:        # complete when reported
        assert_array_equal(gradient, outputs[gradient_name(name)], err_msg=name)
    # The last layer's gradients come before the first layer's.
    assert names.index("fc2.weight") < names.index("fc1.weight"), names


class _FakeRequest:
    def __init__(self, log, buffer):
        self.log, self.buffer = log, buffer

    def test(self):
        return True

    def wait(self):
        return self.buffer


class _FakeComm:
    """Records the buckets a step starts (their sizes) without MPI."""
    def __init__(self):
        self.started = []

    def iallreduce(self, buffer, op, out, **_):
        self.started.append(buffer.nbytes)
        return _FakeRequest(self.started, buffer)


def test_buckets_start_when_full_and_the_rest_goes_last():
    like = {f"p{i}": np.zeros(25, np.float32) for i in range(5)}   # 100 B each
    comm = _FakeComm()
    buckets = GradientBuckets(comm, like, bucket_bytes=200)
    buckets.start_step()
    for name in ("p4", "p3", "p2"):
        buckets.gradient_ready(name, np.full(25, float(name[1]), np.float32))
    assert comm.started == [200]                     # p4 + p3 started during backprop
    gradients = {name: np.full(25, float(name[1]), np.float32) for name in like}
    averaged = buckets.finish(gradients)
    assert comm.started == [200, 300]                # p2, then the unreported p1, p0
    for name, value in gradients.items():
        assert_array_equal(averaged[name], value)
    assert buckets.buckets == 2


class _SlowRequest(_FakeRequest):
    """Completes at its third test(); wait() before that is an error (the thread, not
    the caller, must have completed it)."""
    def __init__(self, log, buffer):
        super().__init__(log, buffer)
        self.tests = 0

    def test(self):
        self.tests += 1
        return self.tests >= 3


class _SlowComm(_FakeComm):
    def iallreduce(self, buffer, op, out, **_):
        self.started.append(buffer.nbytes)
        self.request = _SlowRequest(self.started, buffer)
        return self.request


def test_the_progress_thread_tests_in_flight_buckets_until_they_complete():
    like = {f"p{i}": np.zeros(25, np.float32) for i in range(2)}
    comm = _SlowComm()
    buckets = GradientBuckets(comm, like, bucket_bytes=100, progress="thread")
    try:
        buckets.start_step()
        buckets.gradient_ready("p1", np.ones(25, np.float32))  # starts a bucket, 1 test
        deadline = time.monotonic() + 10
        while buckets.progress_thread.calls < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        with buckets.progress_thread.lock:
            assert comm.request.tests >= 3          # the thread tested it to completion
        calls = buckets.progress_thread.calls
        time.sleep(0.02)                            # nothing in flight: the thread waits
        assert buckets.progress_thread.calls == calls
        buckets.finish({name: np.ones(25, np.float32) for name in like})
    finally:
        buckets.close()
    assert not buckets.progress_thread._thread.is_alive()


def test_a_bad_progress_mode_is_named():
    with pytest.raises(Deep500Error, match="progress='poll'.*'calls'.*'thread'"):
        d5ref.ConsistentDecentralized.check_options(overlap=True, algorithm="mpi",
                                                    progress="poll")


# -- bad input --------------------------------------------------------------------------
def _base():
    return d5ref.GradientDescent(d5ref.from_onnx(small_model()), learning_rate=0.1)


@pytest.mark.parametrize("scheme,options", [
    ("ConsistentNeighbors", {"topology": "ring"}),
    ("ConsistentParameterServer", {}),
])
def test_neighbour_and_parameter_server_schemes_overlap_bit_for_bit(tmp_path, scheme,
                                                                     options):
    """3 ranks: the neighbourhood of a 3-ring is every rank, and the root gathers 2."""
    blocking, blocking_params = train(tmp_path, "blocking", ranks=3, scheme=scheme,
                                      **options)
    overlapped, params = train(tmp_path, "overlapped", ranks=3, scheme=scheme,
                               overlap=True, bucket_bytes=512, progress="thread",
                               **options)
    for rank in range(3):
        assert overlapped[rank]["steps"] == blocking[rank]["steps"], rank
        for name, value in blocking_params[rank].items():
            assert_array_equal(params[rank][name], value, err_msg=f"{name} rank {rank}")
    measured = overlapped[0]["measured"]
    assert measured["overlap"] is True and measured["buckets"] >= 2
    for rank in range(3):   # the same bytes as blocking, bucket by bucket
        assert (overlapped[rank]["measured"]["bytes_sent"] ==
                blocking[rank]["measured"]["bytes_sent"]), rank
        assert (overlapped[rank]["measured"]["bytes_received"] ==
                blocking[rank]["measured"]["bytes_received"]), rank


def test_neighbour_overlap_refuses_parameter_mixing_and_16_bit_wires():
    with pytest.raises(Deep500Error, match="mix='parameters' exchanges the parameters"):
        d5ref.ConsistentNeighbors.check_options(mix="parameters", overlap=True)
    with pytest.raises(Deep500Error, match="comm_dtype='bfloat16' needs overlap=False"):
        d5ref.ConsistentParameterServer.check_options(comm_dtype="bfloat16", overlap=True)


@pytest.mark.parametrize("name", [n for n in SCHEMES if SCHEMES[n].cannot_overlap])
def test_schemes_that_cannot_overlap_say_so(name):
    with pytest.raises(Deep500Error, match="overlap=True: .*Use overlap=False"):
        SCHEMES[name](_base(), overlap=True)
    with pytest.raises(Deep500Error, match="overlap=True"):
        SCHEMES[name].check_options(overlap=True)


def test_overlap_needs_a_non_blocking_allreduce_and_a_bucket_size():
    with pytest.raises(Deep500Error, match="algorithm='binomial' has no non-blocking form; "
                                           "set algorithm='ring' or algorithm='mpi' or "
                                           "overlap=False"):
        d5ref.ConsistentDecentralized(_base(), algorithm="binomial", overlap=True)
    assert d5ref.ConsistentDecentralized.check_options(
        overlap=True, comm_dtype="bfloat16").name == "ring"   # the narrowed request
    with pytest.raises(Deep500Error, match="bucket_bytes=0"):
        d5ref.ConsistentDecentralized.check_options(algorithm="mpi", overlap=True,
                                                    bucket_bytes=0)
    with pytest.raises(Deep500Error, match="overlap='yes'"):
        d5.DistributedOptimizer.check_options(overlap="yes")


def test_overlap_needs_an_executor_with_backward_hooks():
    base = _base()
    base.executor.reports_gradients_early = False   # as an executor without the hooks
    with pytest.raises(Deep500Error, match="reports each gradient as backprop completes "
                                           "it.*Use overlap=False"):
        d5.DistributedOptimizer(base, overlap=True)


def test_overlap_refuses_gradient_modifiers():
    from deep500.lv2_training.optimizer import OptimizerEvent

    class Clip(OptimizerEvent):
        def modify_gradients(self, optimizer, gradients):
            pass
    scheme = d5ref.ConsistentDecentralized(_base(), algorithm="mpi", overlap=True)
    scheme.events.append(Clip())
    with pytest.raises(Deep500Error, match=r"gradient modifiers \['Clip'\]"):
        scheme.step(_inputs())


def test_a_rank_that_dies_in_an_overlapped_step_stops_every_rank(tmp_path):
    status, output, seconds = mpirun(2, "overlap_rank_dies.py", tmp_path, timeout=90)
    assert status != 0, output
    assert "deliberate failure of rank 1 in an overlapped step" in output, output[-3000:]
    assert "finished the epoch" not in output
    # Rank 0 was waiting for its buckets' allreduces: it was stopped, not left hanging
    # (mpirun's timeout above), and the steps both finished before are on disk.
    for rank in range(2):
        lines = (tmp_path / f"steps{rank}.txt").read_text().splitlines()
        assert lines[:3] == ["step 0 done", "step 1 done", "step 2 done"], lines
        assert len(lines) == 3
    assert seconds < 60
