"""The onnxruntime executor: results equal a plain InferenceSession; per-operator times
come from onnxruntime's profiler; the network view feeds parameters and adds outputs;
errors are Deep500Errors."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

import deep500.frameworks.onnxruntime as d5ort  # noqa: E402
from deep500.lv1_network.events import ExecutorEvent  # noqa: E402
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError  # noqa: E402

OPSET = 17
IR_VERSION = 8  # onnxruntime may not read the newest IR version that onnx writes


def make_model(nodes, inputs, outputs, initializers=(), opsets=(("", OPSET),), name="m"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    return helper.make_model(graph, ir_version=IR_VERSION,
                             opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def mlp(dtype=np.float32, named=True):
    """y = relu(x @ W + b) @ V, with the hidden tensors h, a."""
    rng = np.random.default_rng(0)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(dtype), n)
               for n, s in (("W", (4, 5)), ("b", (5,)), ("V", (5, 3)))]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm1" if named else ""),
             helper.make_node("Add", ["h", "b"], ["hb"], name="add" if named else ""),
             helper.make_node("Relu", ["hb"], ["a"], name="relu" if named else ""),
             helper.make_node("MatMul", ["a", "V"], ["y"], name="mm2" if named else "")]
    return make_model(nodes, [helper.make_tensor_value_info("x", elem, [2, 4])],
                      [helper.make_tensor_value_info("y", elem, [2, 3])], weights)


def conv_model():
    rng = np.random.default_rng(1)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("GlobalAveragePool", ["c"], ["y"], name="pool")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [1, 3, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
                      [weight])


def direct(model, inputs):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


class PerOperator(ExecutorEvent):
    wants_operator_events = True

    def __init__(self):
        self.calls = 0

    def before_operator(self, op):
        self.calls += 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inference_equals_a_plain_session(dtype):
    model = mlp(dtype)
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(dtype)
    executor = d5ort.from_onnx(model)
    outputs = executor.inference({"x": x})
    assert set(outputs) == {"y"} and outputs["y"].dtype == dtype
    np.testing.assert_array_equal(outputs["y"], direct(model, {"x": x})["y"])
    np.testing.assert_array_equal(executor.network.fetch_tensor("y"), outputs["y"])


def test_conv_model_and_options_from_a_file(tmp_path):
    model = conv_model()
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    executor = d5ort.from_onnx(str(path), threads=1, optimization="disabled")
    options = executor.network.session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    np.testing.assert_allclose(executor.inference({"x": x})["y"], direct(model, {"x": x})["y"],
                               rtol=1e-5, atol=1e-6)
    assert executor.network.session.get_providers() == ["CPUExecutionProvider"]


def test_backprop_is_refused():
    executor = d5ort.from_onnx(mlp())
    assert executor.supports_backprop is False
    with pytest.raises(Deep500Error, match="inference only"):
        executor.inference_and_backprop({"x": np.zeros((2, 4), np.float32)}, "y")


def test_inputs_are_checked_before_onnxruntime_runs():
    executor = d5ort.from_onnx(mlp())
    with pytest.raises(Deep500Error, match="needs inputs"):
        executor.inference({})
    with pytest.raises(ShapeError, match="shape"):
        executor.inference({"x": np.zeros((3, 4), np.float32)})


@pytest.mark.parametrize("named", [True, False])
def test_operator_times_come_from_the_profiler(named):
    executor = d5ort.from_onnx(mlp(named=named), events=[PerOperator()],
                               optimization="disabled")
    x = np.ones((2, 4), np.float32)
    outputs = executor.inference({"x": x})
    np.testing.assert_array_equal(outputs["y"], direct(mlp(), {"x": x})["y"])
    nodes = {op.name: op.op_type for op in executor.model.operations}
    assert set(executor.last_operator_times) == set(nodes)
    assert executor.last_operator_types == nodes
    assert all(t > 0 for t in executor.last_operator_times.values())
    # onnxruntime cannot call back per node: the hooks are not called
    assert executor.events[0].calls == 0


def test_each_profiled_run_reports_its_own_times_and_cleans_up():
    import gc
    import os
    executor = d5ort.from_onnx(mlp(), events=[PerOperator()], optimization="disabled")
    x = np.ones((2, 4), np.float32)
    seen = []
    for value in (1.0, 2.0, 3.0):
        y = executor.inference({"x": x * value})["y"]
        if value == 2.0:
            executor.network.feed_tensor("b", np.zeros(5, np.float32))  # a new session
        seen.append(executor.last_operator_times)
        assert executor.last_operator_times == seen[-1]  # reading twice changes nothing
    assert all(set(times) == {"mm1", "add", "relu", "mm2"} for times in seen)
    assert len({tuple(times.values()) for times in seen}) > 1  # measured anew each run
    directory = executor._profiler.directory
    # only the trace of the session readied for the next run, opened on its creation
    assert len([f for f in os.listdir(directory) if f.endswith(".json")]) == 1
    del executor
    gc.collect()
    assert not os.path.exists(directory)


def test_runs_between_readings_are_all_reported():
    executor = d5ort.from_onnx(mlp(), events=[PerOperator()])
    for _ in range(3):
        executor.inference({"x": np.ones((2, 4), np.float32)})
    runs = executor.operator_times_of_runs
    assert len(runs) == 3 and runs[-1] == executor.last_operator_times
    executor.inference({"x": np.ones((2, 4), np.float32)})
    assert len(executor.operator_times_of_runs) == 1


def test_no_profiling_without_operator_events():
    executor = d5ort.from_onnx(mlp(), events=[ExecutorEvent()])
    executor.inference({"x": np.ones((2, 4), np.float32)})
    assert executor.last_operator_times == {}


def test_profiler_trace_parsing_keeps_the_last_run():
    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 50},
        {"cat": "Node", "name": "a_kernel_time", "ts": 10, "dur": 40,
         "args": {"op_name": "Relu"}},
        {"cat": "Session", "name": "model_run", "ts": 100, "dur": 50},
        {"cat": "Node", "name": "a_fence_before", "ts": 101, "dur": 0},
        {"cat": "Node", "name": "a_kernel_time", "ts": 110, "dur": 4,
         "args": {"op_name": "Relu"}},
        {"cat": "Node", "name": "body/b_kernel_time", "ts": 120, "dur": 3, "args": {}},
        {"cat": "Node", "name": "body/b_kernel_time", "ts": 130, "dur": 3, "args": {}},
    ]
    times, types = d5ort.executor.node_times(events)
    assert times == pytest.approx({"a": 4e-6, "body/b": 6e-6})
    assert types == {"a": "Relu", "body/b": "?"}
    runs, _ = d5ort.executor.node_times_per_run(events)
    assert runs == [pytest.approx({"a": 40e-6}), pytest.approx({"a": 4e-6, "body/b": 6e-6})]


def test_feeding_a_parameter_changes_the_output():
    model = mlp()
    executor = d5ort.from_onnx(model)
    network = executor.network
    assert network.get_params() == ["W", "b", "V"]
    x = np.ones((2, 4), np.float32)
    before = executor.inference({"x": x})["y"]
    network.feed_tensor("V", np.zeros((5, 3)), is_param=True)  # float64 cast to float32
    assert network.fetch_tensor("V").dtype == np.float32
    np.testing.assert_array_equal(executor.inference({"x": x})["y"], np.zeros((2, 3)))
    assert not np.allclose(before, 0)
    with pytest.raises(ShapeError, match="shape"):
        network.feed_tensor("V", np.zeros((3, 5), np.float32))
    with pytest.raises(Deep500Error, match="executor.inference"):
        network.feed_tensor("x", x)


def test_add_output_exposes_an_intermediate_tensor():
    model = mlp()
    executor = d5ort.from_onnx(model)
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
    with pytest.raises(Deep500Error, match="add_output"):
        executor.network.fetch_tensor("a")
    executor.network.add_output("a")
    outputs = executor.inference({"x": x})
    assert set(outputs) == {"y", "a"}
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_allclose(executor.network.fetch_tensor("a"),
                               np.maximum(x @ weights["W"] + weights["b"], 0), rtol=1e-5)
    with pytest.raises(Deep500Error, match="no tensor"):
        executor.network.add_output("nonexistent")


def test_graph_edits_are_refused():
    executor = d5ort.from_onnx(mlp())
    with pytest.raises(UnsupportedError, match="read-only"):
        executor.network.remove_node("relu")


def test_sequence_inputs_are_passed_through():
    model = make_model([helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                       [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["n", 2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 2])])
    parts = [np.ones((1, 2), np.float32), np.zeros((3, 2), np.float32)]
    outputs = d5ort.from_onnx(model).inference({"s": parts})
    np.testing.assert_array_equal(outputs["y"], np.concatenate(parts))


def test_bfloat16_tensors_round_trip():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                       [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])])
    y = d5ort.from_onnx(model).inference({"x": np.array([1.5, -2, 3], np.float32)})["y"]
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.astype(np.float32), [1.5, -2, 3])


def test_a_corrupt_file_is_a_deep500_error(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07not an onnx model at all")
    with pytest.raises(Deep500Error, match="broken.onnx"):
        d5ort.from_onnx(str(path))


def test_a_custom_domain_operator_is_unsupported():
    model = make_model([helper.make_node("Foo", ["x"], ["y"], domain="my.domain",
                                         name="foo1")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                       opsets=(("", OPSET), ("my.domain", 1)))
    with pytest.raises(UnsupportedError, match="Foo") as error:
        d5ort.from_onnx(model)
    assert "foo1" in str(error.value)


def test_an_operator_onnxruntime_lacks_is_unsupported():
    # the training optimizers of onnx's preview domain are not in onnxruntime's
    # inference build
    names = ["R", "T", "X", "G", "H"]
    shapes = {"R": [], "T": [], "X": [3], "G": [3], "H": [3]}
    types = {"T": TensorProto.INT64}
    model = make_model(
        [helper.make_node("Adagrad", names, ["X_new", "H_new"],
                          domain="ai.onnx.preview.training", name="opt")],
        [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), shapes[n])
         for n in names],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("X_new", "H_new")],
        opsets=(("", OPSET), ("ai.onnx.preview.training", 1)), name="adagrad_model")
    with pytest.raises(UnsupportedError, match="onnxruntime .* could not load model "
                                               "'adagrad_model'.*Adagrad"):
        d5ort.from_onnx(model)


def test_a_run_time_failure_names_the_model():
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                        helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
                       name="reshaper")
    executor = d5ort.from_onnx(model)
    with pytest.raises(Deep500Error, match="could not run model 'reshaper'"):
        executor.inference({"x": np.zeros((2, 3), np.float32),
                            "shape": np.array([4, 4], np.int64)})


def test_a_gpu_without_the_cuda_provider_is_refused():
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has a CUDA provider")
    with pytest.raises(UnsupportedError, match="CUDAExecutionProvider"):
        d5ort.from_onnx(mlp(), device="gpu")


def test_unknown_options_are_refused():
    with pytest.raises(Deep500Error, match="optimization"):
        d5ort.from_onnx(mlp(), optimization="maximum")
    with pytest.raises(Deep500Error, match="threads"):
        d5ort.from_onnx(mlp(), threads=0)
