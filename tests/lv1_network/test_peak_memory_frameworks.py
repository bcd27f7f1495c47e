"""PeakMemory measures PyTorch and TensorFlow by their own allocators (never by
tracemalloc, which sees only the Python heap), and names the method in its record."""
import numpy as np
import onnx
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.networks import create_model
from deep500.recipe.experiments.networks import make_inputs
from deep500.utils.errors import Deep500Error

BATCH = 8


@pytest.fixture(scope="module")
def lenet():
    model = create_model("lenet", batch_size=BATCH, loss="softmax_cross_entropy")
    return model, make_inputs(model, BATCH, 0, 10)


def _parameter_bytes(model) -> int:
    return sum(onnx.numpy_helper.to_array(i).nbytes for i in model.graph.initializer
               if onnx.numpy_helper.to_array(i).dtype.kind == "f")


def test_pytorch_backprop_peak_holds_at_least_the_gradients(lenet):
    """A backward pass allocates a gradient for every parameter, so its peak is at
    least the parameters' size (tracemalloc saw a few KiB of Python objects here)."""
    bridge = pytest.importorskip("deep500.frameworks.pytorch")
    model, inputs = lenet
    result = d5.test_executor_backprop(bridge.from_onnx(model), inputs, y="loss",
                                       metrics=[d5.PeakMemory("auto")])
    summary = result["PeakMemory"].summary
    assert summary["measured_by"].startswith("torch.profiler allocator events")
    assert summary["peak_bytes"] >= _parameter_bytes(model), summary


@pytest.mark.slow   # a fresh Python process imports TensorFlow
def test_tensorflow_peak_from_a_fresh_process(lenet):
    """TensorFlow's CPU allocator leaves small tensors out of its statistics, so its
    peak comes from the resident-set high-water mark of a fresh process."""
    pytest.importorskip("tensorflow")
    from deep500.frameworks.fresh_process_memory import first_run_peak_rss
    model, inputs = lenet
    peak = first_run_peak_rss(model, inputs, "tensorflow", "cpu", "backprop", threads=1)
    assert peak >= _parameter_bytes(model)
    assert peak < 2 ** 30   # a LeNet at batch 8 touches megabytes, not gigabytes


def test_tracemalloc_is_refused_for_native_tensors(lenet):
    torch_bridge = pytest.importorskip("deep500.frameworks.pytorch")
    model, inputs = lenet
    with pytest.raises(Deep500Error, match="own allocator"):
        d5.test_executor_inference(torch_bridge.from_onnx(model), inputs,
                                   metrics=[d5.PeakMemory("tracemalloc")])
    with pytest.raises(Deep500Error, match="must be one of"):
        d5.PeakMemory("rss")


def test_tracemalloc_sees_numpy_arrays(lenet):
    """NumPy reports its buffers to tracemalloc, so it measures the reference executor
    (temporaries inside operators included)."""
    metric = d5.PeakMemory("auto")
    metric.bind(d5ref.from_onnx(lenet[0]))
    metric.begin()
    buffer = np.ones(2 ** 20)   # 8 MiB
    del buffer
    metric.end()
    summary = metric.measure().summary
    assert summary["measured_by"].startswith("tracemalloc")
    assert 2 ** 23 <= summary["peak_bytes"] < 2 ** 23 + 2 ** 20
