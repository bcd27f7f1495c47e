"""Failure classes of synthetic results: from the model, the exception and the
comparison, never from the case's name."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from deep500 import conformance as conf
from deep500.conformance.classify import NEAR_MISS
from deep500.conformance.compare import Mismatch
from deep500.utils.errors import UnsupportedError


def case_of(nodes, inputs, outputs, name="test_case", data=None, initializers=(),
            domains=()):
    """A ConformanceCase over ``nodes``; ``inputs``/``outputs`` are value infos."""
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", 22)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    return conf.ConformanceCase(name, model, [(data or [], [])])


def tensor(name, elem_type=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem_type, None)


def unary(op_type="Relu", elem_type=TensorProto.FLOAT, name="test_case", **attributes):
    return case_of([helper.make_node(op_type, ["x"], ["y"], **attributes)],
                   [tensor("x", elem_type)], [tensor("y", elem_type)], name)


def dropout(ratio, training, fed=True):
    values = [np.zeros((3, 4), np.float32), np.array(ratio, np.float32), np.array(training)]
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    if fed:
        return case_of([node], [tensor("x"), tensor("r"), tensor("t", TensorProto.BOOL)],
                       [tensor("y")], data=values)
    stored = [numpy_helper.from_array(v, n) for v, n in zip(values[1:], "rt")]
    return case_of([node], [tensor("x")], [tensor("y")], data=values[:1],
                   initializers=stored)


def values_mismatch(near_miss, max_ulp=3.0):
    return Mismatch("output 'y': values differ", "values", max_ulp=max_ulp,
                    near_miss=near_miss)


# -- nondeterministic ---------------------------------------------------------------
@pytest.mark.parametrize("op_type", sorted(conf.RANDOM_OPERATORS))
def test_random_operators_are_nondeterministic_whatever_happened(op_type):
    case = unary(op_type)
    for status, mismatch in (("fail", values_mismatch(100.0)), ("unsupported", None),
                             ("error", None)):
        assert conf.classify(case, status, "whatever", mismatch) == "nondeterministic"
    assert conf.classify(case, "pass") == ""


@pytest.mark.parametrize("ratio, training, fed, expected", [
    (0.5, True, True, "nondeterministic"),
    (0.75, True, False, "nondeterministic"),     # read from initializers
    (0.0, True, True, "wrong"),                  # keeps everything: deterministic
    (0.5, False, True, "wrong"),                 # inference: identity
])
def test_dropout_is_random_only_when_it_trains_with_a_ratio(ratio, training, fed, expected):
    case = dropout(ratio, training, fed)
    assert conf.classify(case, "fail", "", values_mismatch(100.0)) == expected


def test_an_inference_dropout_without_training_mode_is_deterministic():
    case = unary("Dropout")
    assert conf.random_reason(case.model, {}) == ""
    assert "training_mode" in conf.random_reason(dropout(0.1, True).model,
                                                 {"r": np.float32(0.1), "t": np.True_})


# -- harness ------------------------------------------------------------------------
def test_sequence_and_optional_graph_values_are_the_harness():
    sequence = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    optional = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    for inputs, outputs in (([sequence], [tensor("y")]), ([tensor("x")], [optional])):
        case = case_of([helper.make_node("Identity", [inputs[0].name], [outputs[0].name])],
                       inputs, outputs)
        assert conf.classify(case, "unsupported", "UnsupportedError: does not support "
                             "operator Identity") == "harness"
        assert conf.harness_reason(case.model)


def test_training_operators_run_as_inference_are_the_harness():
    node = helper.make_node("Adagrad", ["r", "t", "x"], ["y"],
                            domain="ai.onnx.preview.training")
    case = case_of([node], [tensor("r"), tensor("t"), tensor("x")], [tensor("y")],
                   domains=["ai.onnx.preview.training"])
    assert conf.classify(case, "unsupported", "does not support operator Adagrad") == "harness"
    assert "training operator" in conf.harness_reason(case.model)


def test_test_data_that_does_not_fit_the_graph_is_the_harness():
    mismatch = Mismatch("the test has 2 expected outputs for the graph's 1", "data")
    assert conf.classify(unary(), "fail", str(mismatch), mismatch) == "harness"


# -- dtype, unsupported op, error ---------------------------------------------------
@pytest.mark.parametrize("status, message, elem_type, expected", [
    ("unsupported", "UnsupportedError: The PyTorch executor has no tensor type for ONNX INT4",
     TensorProto.FLOAT, "dtype"),
    ("unsupported", "when run: UnsupportedError: tensor 'x' has ONNX type TensorProto.UINT2, "
     "packed below a byte per element", TensorProto.FLOAT, "dtype"),
    ("error", "TypeError: no kernel for bfloat16", TensorProto.FLOAT, "dtype"),
    ("error", "InvalidArgumentError: Could not find device for node AddV2[T=DT_UINT32]",
     TensorProto.UINT32, "dtype"),
    # onnxruntime's words when no kernel has the case's element types
    ("unsupported", "UnsupportedError: NOT_IMPLEMENTED : Could not find an implementation "
     "for OneHot(28) node", TensorProto.BFLOAT16, "dtype"),
    ("unsupported", "UnsupportedError: NOT_IMPLEMENTED : Could not find an implementation "
     "for RoiAlign(22) node", TensorProto.FLOAT, "unsupported op"),
    # an operator declined is that, whatever the element type
    ("unsupported", "UnsupportedError: The PyTorch executor does not support operator "
     "StringConcat (opset version 20)", TensorProto.STRING, "unsupported op"),
    ("unsupported", "UnsupportedError: onnxruntime: ai.onnx.preview:FlexAttention(-1) is not "
     "a registered function/op", TensorProto.FLOAT16, "unsupported op"),
    ("unsupported", "UnsupportedError: node 'Pad_0': pads must be constants",
     TensorProto.FLOAT, "unsupported op"),
    # a form declined in a bfloat16 case is still the form
    ("unsupported", "UnsupportedError: node 'Pad_0': pads must be constants",
     TensorProto.BFLOAT16, "unsupported op"),
    ("error", "ShapeError: Non-zero status code returned while running Einsum node",
     TensorProto.FLOAT, "error"),
    ("error", "ModelError: Exception during initialization: string_normalizer.cc:235 "
     "Locale(const std::string&) Failed to construct locale", TensorProto.STRING, "error"),
])
def test_exceptions(status, message, elem_type, expected):
    assert conf.classify(unary(elem_type=elem_type), status, message) == expected


def test_a_kernel_lookup_failure_is_a_dtype_only_where_the_operator_runs_elsewhere():
    message = "UnsupportedError: NOT_IMPLEMENTED : Failed to find kernel for Swish(24)"
    case = unary("Swish", TensorProto.FLOAT16)
    assert conf.classify(case, "unsupported", message, operator_passes=True) == "dtype"
    assert conf.classify(case, "unsupported", message, operator_passes=False) == \
        "unsupported op"


def test_a_run_tells_a_missing_kernel_from_a_missing_operator():
    """Relu runs in float32 but declines float16: dtype; Swish declines both: an
    operator missing, whatever the element type."""
    data = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}
    cases = [case_of([helper.make_node(op, ["x"], ["y"])], [tensor("x", t)], [tensor("y", t)],
                     name=f"test_{op.lower()}_{t}") for op in ("Relu", "Swish") for t in data]
    for case in cases:
        x = np.ones(3, data[case.model.graph.input[0].type.tensor_type.elem_type])
        case.data_sets = [([x], [x])]
        case.op_type = case.model.graph.node[0].op_type

    class Executor:
        def __init__(self, model):
            node = model.graph.node[0]
            if node.op_type == "Swish" or model.graph.input[0].type.tensor_type.elem_type \
                    == TensorProto.FLOAT16:
                raise UnsupportedError("Could not find an implementation for "
                                            f"{node.op_type}(24)")

        def inference(self, inputs):
            return {"y": inputs["x"]}
    results = conf.run_conformance(cases, {"fake": Executor}, progress=False)
    assert {r.case: r.failure_class for r in results.results} == {
        "test_relu_1": "", "test_relu_10": "dtype", "test_swish_1": "unsupported op",
        "test_swish_10": "unsupported op"}


def test_the_case_name_is_not_read_as_a_dtype():
    case = unary(name="test_cast_FLOAT16_to_FLOAT")
    message = ("UnsupportedError: node 'Cast_0' of model 'test_cast_FLOAT16_to_FLOAT': "
               "the saturate attribute is not implemented")
    assert conf.classify(case, "unsupported", message) == "unsupported op"


# -- computed results ---------------------------------------------------------------
@pytest.mark.parametrize("mismatch, elem_type, expected", [
    (values_mismatch(1.5), TensorProto.FLOAT, "tolerance"),
    (values_mismatch(NEAR_MISS), TensorProto.FLOAT, "tolerance"),
    (values_mismatch(NEAR_MISS * 1.01), TensorProto.FLOAT, "wrong"),
    (values_mismatch(2.0), TensorProto.BFLOAT16, "tolerance"),
    (values_mismatch(50.0), TensorProto.BFLOAT16, "dtype"),       # mishandles bfloat16
    (Mismatch("NaN or infinities differ", "nonfinite"), TensorProto.FLOAT, "wrong"),
    (Mismatch("dtype int32, expected float32", "dtype"), TensorProto.FLOAT, "dtype"),
    (Mismatch("shape [2, 1], expected [2]", "shape"), TensorProto.FLOAT16, "wrong"),
    (Mismatch("no output 'y'", "missing"), TensorProto.FLOAT, "wrong"),
    (Mismatch("expected a tensor, got list", "structure"), TensorProto.FLOAT, "wrong"),
])
def test_comparisons(mismatch, elem_type, expected):
    assert conf.classify(unary(elem_type=elem_type), "fail", str(mismatch),
                         mismatch) == expected


def test_every_class_is_described():
    assert list(conf.FAILURE_CLASSES) == ["nondeterministic", "harness", "dtype",
                                          "unsupported op", "tolerance", "wrong", "error"]
    assert all(len(why) > 40 for why in conf.FAILURE_CLASSES.values())
