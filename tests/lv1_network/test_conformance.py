"""ONNX conformance: the locked passing cases keep passing on every executor, and the
harness loads, runs, classifies and reports cases correctly."""
import dataclasses
import json
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.case.test_case import TestCase

from deep500 import conformance as conf
from deep500.cli import main
from deep500.frameworks import registry
from deep500.utils.errors import Deep500Error, UnsupportedError

LOCKED = pathlib.Path(__file__).with_name("conformance_passing.json")


# -- the locked passing set -----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("executor", conf.EXECUTORS)
def test_locked_cases_still_pass(executor):
    locked = conf.read_locked(str(LOCKED)).get(executor, [])
    if not locked:
        pytest.skip(f"no locked conformance cases for {executor}")
    framework = registry.framework_of(executor)
    if not framework.is_installed():
        pytest.skip(framework.missing_dependency_message())
    factories, skipped = conf.executor_factories([executor])
    assert executor in factories, skipped.get(executor)
    suite = {case.name: case for case in conf.load_cases()}
    cases = [suite[name] for name in locked if name in suite]
    if not cases:
        pytest.skip(f"none of the locked cases exists in onnx {onnx.__version__}")
    results = conf.run_conformance(cases, factories, progress=False)
    broken = [f"{r.case}: {r.status}: {r.message[:200]}" for r in results.results
              if r.status != "pass"]
    assert not broken, (f"{len(broken)} of {len(cases)} locked cases no longer pass on "
                        f"{executor}:\n" + "\n".join(broken[:30]))


# -- the harness --------------------------------------------------------------------------
def relu_model(name="test_relu_example", dtype=TensorProto.FLOAT):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], name,
                              [helper.make_tensor_value_info("x", dtype, [2, 3])],
                              [helper.make_tensor_value_info("y", dtype, [2, 3])])
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 14)])


def relu_data(rows=2):
    x = np.linspace(-1, 1, 3 * rows, dtype=np.float32).reshape(rows, 3)
    return x, np.maximum(x, 0)


class Fake:
    """An executor computing ``fn(x)`` for output 'y'."""

    def __init__(self, fn):
        self.fn = fn

    def inference(self, inputs):
        return self.fn(inputs["x"])


def outcome(fn, case=None, **kwargs):
    case = case or conf.case_from_test_case(in_memory_case())
    return conf.run_case(case, lambda model: Fake(fn), **kwargs)


def in_memory_case(name="test_relu_example", data_sets=None):
    x, y = relu_data()
    return TestCase(name=name, model_name=name, url=None, model_dir=None,
                    model=relu_model(name), data_sets=data_sets or [([x], [y])], kind="node",
                    rtol=1e-3, atol=1e-7)


def test_in_memory_cases_are_normalized():
    x, y = relu_data()
    test_case = in_memory_case(data_sets=[([numpy_helper.from_array(x)], [y]),
                                          ([x[0, 0]], [np.float32(0)])])
    case = conf.case_from_test_case(test_case)
    assert case.name == "test_relu_example" and case.op_type == ""
    assert case.input_names == ["x"] and case.output_names == ["y"]
    (inputs, outputs), (scalar_in, scalar_out) = case.data_sets
    np.testing.assert_array_equal(inputs[0], x)
    assert isinstance(scalar_in[0], np.ndarray) and scalar_out[0].shape == ()


def write_case_folder(root, name, model, data_sets, sequence_inputs=()):
    folder = root / name
    folder.mkdir()
    onnx.save(model, str(folder / "model.onnx"))
    for index, (inputs, outputs) in enumerate(data_sets):
        data = folder / f"test_data_set_{index}"
        data.mkdir()
        for kind, values in (("input", inputs), ("output", outputs)):
            for position, value in enumerate(values):
                proto = (numpy_helper.from_list(value) if kind == "input" and
                         position in sequence_inputs else numpy_helper.from_array(value))
                (data / f"{kind}_{position}.pb").write_bytes(proto.SerializeToString())
    return folder


def test_cases_stored_on_disk_are_read(tmp_path):
    x, y = relu_data()
    x3, y3 = relu_data(rows=2)
    folder = write_case_folder(tmp_path, "test_relu_disk", relu_model("test_relu_disk"),
                               [([x], [y]), ([-x3], [np.maximum(-x3, 0)])])
    concat = helper.make_model(helper.make_graph(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "concat",
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 3])]),
        ir_version=8, opset_imports=[helper.make_opsetid("", 14)])
    parts = [x, x[:1]]
    write_case_folder(tmp_path, "test_concat_from_sequence_disk", concat,
                      [([parts], [np.concatenate(parts)])], sequence_inputs=(0,))
    on_disk = TestCase(name="test_relu_disk", model_name="relu", url=None,
                       model_dir=str(folder), model=None, data_sets=None, kind="node",
                       rtol=1e-3, atol=1e-7)
    case = conf.case_from_test_case(on_disk)
    assert len(case.data_sets) == 2
    np.testing.assert_array_equal(case.data_sets[1][1][0], np.maximum(-x3, 0))
    cases = conf.cases_from_directory(str(tmp_path))
    assert [c.name for c in cases] == ["test_concat_from_sequence_disk", "test_relu_disk"]
    assert [c.op_type for c in cases] == ["ConcatFromSequence", "Relu"]
    sequence = cases[0].data_sets[0][0][0]
    assert isinstance(sequence, list) and [p.shape for p in sequence] == [(2, 3), (1, 3)]
    assert conf.cases_from_directory(str(tmp_path), pattern="relu")[0].name == "test_relu_disk"


@pytest.mark.parametrize("fn, status, message, failure_class", [
    (lambda x: {"y": np.maximum(x, 0)}, "pass", "", ""),
    (lambda x: {"y": np.maximum(x, 0).astype(np.float64)}, "pass", "", ""),
    (lambda x: {"y": np.maximum(x, 0) + 1e-4}, "fail", "tolerance", "tolerance"),
    (lambda x: {"y": np.maximum(x, 0) + 0.5}, "fail", "tolerance", "wrong"),
    (lambda x: {"y": np.maximum(x, 0).astype(np.int32)}, "fail", "dtype int32", "dtype"),
    (lambda x: {"y": np.maximum(x, 0).ravel()}, "fail", "shape", "wrong"),
    (lambda x: {"z": x}, "fail", "no output 'y'", "wrong"),
    (lambda x: {"y": [x]}, "fail", "expected a tensor", "wrong"),
])
def test_results_are_classified(fn, status, message, failure_class):
    result = outcome(fn)
    assert result.status == status
    assert message in result.message
    assert result.failure_class == failure_class


def _raise(error):
    def fn(*args):
        raise error
    return fn


@pytest.mark.parametrize("factory, status, message, failure_class", [
    (_raise(UnsupportedError("no Relu here")), "unsupported", "UnsupportedError: no Relu",
     "unsupported op"),
    (_raise(NotImplementedError("later")), "unsupported", "NotImplementedError: later",
     "unsupported op"),
    (_raise(ValueError("broken\n  visitor")), "error", "ValueError: broken visitor", "error"),
    (lambda model: Fake(_raise(RuntimeError("kernel crashed"))), "error", "kernel crashed",
     "error"),
    (lambda model: Fake(_raise(UnsupportedError("no bfloat16 here"))), "unsupported",
     "when run", "dtype"),
])
def test_exceptions_are_classified(factory, status, message, failure_class):
    result = conf.run_case(conf.case_from_test_case(in_memory_case()), factory)
    assert result.status == status
    assert message in result.message
    assert result.failure_class == failure_class


def test_nan_positions_must_match():
    expected = np.array([1.0, np.nan], np.float32)
    conf.assert_similar(expected, np.array([1.0, np.nan], np.float32))
    with pytest.raises(AssertionError):
        conf.assert_similar(expected, np.array([np.nan, 1.0], np.float32))
    conf.assert_similar(np.array([True, False]), np.array([True, False]))
    conf.assert_similar(np.array(["a", "b"], dtype=object), np.array(["a", "b"], dtype=object))
    conf.assert_similar([np.ones(2)], [np.ones(2)])
    conf.assert_similar(None, None)
    with pytest.raises(AssertionError, match="sequence of 1"):
        conf.assert_similar([np.ones(2)], [np.ones(2), np.ones(2)])


def test_the_time_limit_skips_remaining_data_sets():
    x, y = relu_data()
    case = conf.case_from_test_case(in_memory_case(data_sets=[([x], [y])] * 3))
    result = outcome(lambda v: {"y": np.maximum(v, 0)}, case, time_limit=0)
    assert result.status == "pass" and "1 of 3 data sets" in result.message


def test_inputs_are_copies():
    case = conf.case_from_test_case(in_memory_case())
    original = case.data_sets[0][0][0].copy()

    def clobber(x):
        y = np.maximum(x, 0)
        x[...] = 7
        return {"y": y}
    assert outcome(clobber, case).status == "pass"
    np.testing.assert_array_equal(case.data_sets[0][0][0], original)


def test_tested_operator_comes_from_the_name_and_expanded_twins():
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("ReduceSum", ["e"], ["s"]),
             helper.make_node("Div", ["e", "s"], ["y"])]
    expanded = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])]))
    assert conf.tested_operator("test_reduce_sum_something", expanded) == "ReduceSum"
    assert conf.tested_operator("test_softmax_axis_0_expanded", expanded) == "Softmax"
    assert conf.tested_operator("test_anything", relu_model()) == "Relu"
    x, y = relu_data()
    cases = conf.load_cases(test_cases=[
        in_memory_case("test_thing_example"),
        TestCase(name="test_thing_example_expanded_ver18", model_name="t", url=None,
                 model_dir=None, model=expanded, data_sets=[([x], [y])], kind="node",
                 rtol=1e-3, atol=1e-7)])
    assert [c.op_type for c in cases] == ["Relu", "Relu"]


def test_results_tables_and_the_locked_set(tmp_path):
    x, y = relu_data()
    cases = conf.load_cases(test_cases=[in_memory_case("test_relu_a"),
                                        in_memory_case("test_relu_b")], pattern="relu")
    good = lambda model: Fake(lambda v: {"y": np.maximum(v, 0)})  # noqa: E731
    bad = lambda model: Fake(lambda v: {"y": v})  # noqa: E731
    results = conf.run_conformance(cases, {"good": good, "bad": bad}, progress=False,
                                   skipped={"absent": "not installed"}, command="cmd")
    assert results.counts("good") == {"pass": 2, "fail": 0, "unsupported": 0, "error": 0}
    assert results.passing() == {"good": ["test_relu_a", "test_relu_b"], "bad": []}
    text = conf.summary_page(results)
    assert "Generated by `cmd`" in text and f"onnx {onnx.__version__}" in text
    assert "| good | 2 | 0 | 0 | 0 | 2 | 100.0 |" in text
    assert "| bad | 0 | 2 | 0 | 0 | 2 | 0.0 |" in text
    assert "| Relu | 2/2 | 0/2 |" in text
    assert "Not run: **absent**" in text
    saved = tmp_path / "results.json"
    results.write_json(str(saved))
    data = json.loads(saved.read_text())
    assert data["executors"]["bad"]["test_relu_a"]["status"] == "fail"
    assert data["executors"]["good"]["test_relu_b"]["op_type"] == "Relu"

    locked = tmp_path / "passing.json"
    locked.write_text(json.dumps({"bad": ["test_relu_a", "test_gone"], "other": ["x"]}))
    regressions = conf.update_locked(str(locked), results)
    assert regressions == {"bad": ["test_relu_a"]}
    assert json.loads(locked.read_text()) == {
        "bad": ["test_gone", "test_relu_a"], "good": ["test_relu_a", "test_relu_b"],
        "other": ["x"]}
    conf.update_locked(str(locked), results, replace=True)
    assert json.loads(locked.read_text())["bad"] == ["test_gone"]


def test_missing_executors_are_skipped(monkeypatch):
    ghost = dataclasses.replace(registry.get("onnxruntime"), name="ghost",
                                module="deep500.frameworks.no_such_bridge",
                                requires=("no_such_package",), executors={"ghost": {}})
    monkeypatch.setitem(registry.FRAMEWORKS, "ghost", ghost)
    factories, skipped = conf.executor_factories(["reference", "ghost"])
    assert list(factories) == ["reference"] and "does not import" in skipped["ghost"]


def test_unknown_executors_name_the_registered_ones():
    with pytest.raises(Deep500Error) as error:
        conf.executor_factories(["pytorh"])
    message = str(error.value)
    assert "Unknown executor 'pytorh'" in message and "Did you mean 'pytorch'?" in message
    assert all(name in message for name in registry.executor_names())


def test_the_command_writes_its_outputs(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    status = main(["conformance", "--executors", "onnxruntime", "--pattern",
                   "^test_(abs|relu)$", "--out", str(tmp_path), "--quiet"])
    assert status == 0
    passing = json.loads((tmp_path / "conformance_passing.json").read_text())
    assert {"test_abs", "test_relu"} <= set(passing["onnxruntime"])
    assert json.loads((tmp_path / "conformance.json").read_text())["executors"]
    table = (tmp_path / "conformance.md").read_text()
    assert "deep500 conformance --executors onnxruntime --pattern '^test_(abs|relu)$'" in table
    assert "| Abs | 1/1 |" in table
    assert "onnxruntime  pass    2" in capsys.readouterr().out
