"""FlexAttention (domain ai.onnx.preview): forward against ONNX's ReferenceEvaluator (which
runs the operator's function body), with grouped queries, other value sizes, scales,
precisions and modifier bodies; gradients of Q, K, V and of the outer-scope tensors the
bodies read against central finite differences in float64."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import deep500.frameworks.reference as d5ref
from deep500.frameworks.reference.operators import create_operator
from deep500.frameworks.reference.visitor import ReferenceVisitor
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.parser import load_and_parse_model
from tests.frameworks.reference.op_checks import check_gradient

PREVIEW = "ai.onnx.preview"
ELEMENT = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
           np.float16: TensorProto.FLOAT16}


def body(name, nodes, initializers=(), elem=TensorProto.FLOAT):
    """A modifier body: x (B, H, L, S) -> y."""
    info = [helper.make_tensor_value_info(n, elem, [None] * 4) for n in ("x", "y")]
    return helper.make_graph(nodes, name, info[:1], info[1:], list(initializers))


CAUSAL = body("causal", [
    helper.make_node("Shape", ["x"], ["shape"]),
    helper.make_node("Gather", ["shape", "two"], ["rows"]),
    helper.make_node("Gather", ["shape", "three"], ["columns"]),
    helper.make_node("Range", ["zero", "rows", "one"], ["i"]),
    helper.make_node("Range", ["zero", "columns", "one"], ["j"]),
    helper.make_node("Unsqueeze", ["i", "last"], ["i_column"]),
    helper.make_node("GreaterOrEqual", ["i_column", "j"], ["allowed"]),
    helper.make_node("Where", ["allowed", "x", "minus_infinity"], ["y"])],
    [numpy_helper.from_array(np.int64(v), n) for n, v in
     (("zero", 0), ("one", 1), ("two", 2), ("three", 3))] +
    [numpy_helper.from_array(np.array([1], np.int64), "last"),
     numpy_helper.from_array(np.float32(-np.inf), "minus_infinity")])
SOFT_CAP = body("soft_cap", [helper.make_node("Div", ["x", "cap"], ["t"]),
                             helper.make_node("Tanh", ["t"], ["u"]),
                             helper.make_node("Mul", ["u", "cap"], ["y"])],
                [numpy_helper.from_array(np.float32(2.0), "cap")])
HALVE = body("halve", [helper.make_node("Mul", ["x", "half"], ["y"])],
             [numpy_helper.from_array(np.float32(0.5), "half")])


def model_of(shapes, dtype, attributes, outer=()):
    names = ["Q", "K", "V"]
    node = helper.make_node("FlexAttention", names, ["Y"], domain=PREVIEW, **attributes)
    inputs = [helper.make_tensor_value_info(n, ELEMENT[dtype], s) for n, s in zip(names, shapes)]
    output = helper.make_tensor_value_info("Y", ELEMENT[dtype], [None] * 4)
    graph = helper.make_graph([node], "flex", inputs, [output], list(outer))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                   helper.make_opsetid(PREVIEW, 1)])


def tensors(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


PLAIN = [(2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4)]
CASES = [
    (PLAIN, {}), ([(1, 4, 3, 8), (1, 2, 6, 8), (1, 2, 6, 5)], {}),
    (PLAIN, {"scale": 0.3}), (PLAIN, {"score_mod": SOFT_CAP}),
    ([(1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4)], {"score_mod": CAUSAL}),
    (PLAIN, {"prob_mod": HALVE}), (PLAIN, {"score_mod": SOFT_CAP, "prob_mod": HALVE})]


@pytest.mark.parametrize("shapes,attributes", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_flex_attention_matches_onnx(shapes, attributes, dtype):
    model = model_of(shapes, dtype, attributes)
    inputs = dict(zip("QKV", tensors(shapes, dtype)))
    expected, = ReferenceEvaluator(model).run(None, inputs)
    got = d5ref.from_onnx(model).inference(inputs)["Y"]
    assert got.dtype == dtype
    tolerance = 1e-5 if dtype == np.float32 else 2e-3   # float16: its rounding of Y
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


def test_double_inputs_work_in_double():
    shapes = PLAIN
    model = model_of(shapes, np.float64, {})
    inputs = dict(zip("QKV", tensors(shapes, np.float64)))
    expected, = ReferenceEvaluator(model).run(None, inputs)
    # ONNX's function body computes the default scale 1/√E in float32 (rounding ~6e-8),
    # the reference in double.
    np.testing.assert_allclose(d5ref.from_onnx(model).inference(inputs)["Y"], expected,
                               rtol=1e-6, atol=1e-9)


def operator_of(model):
    """The reference operator of the model's FlexAttention node, bound to its bodies."""
    parsed = load_and_parse_model(model)
    op = next(o for o in parsed.operations if o.op_type == "FlexAttention")
    return ReferenceVisitor().convert(op), list(op.implicit_inputs)


def test_gradients_through_both_bodies_and_their_outer_tensors():
    elem = TensorProto.DOUBLE
    score_mod = body("bias", [helper.make_node("Add", ["x", "bias"], ["y"])], elem=elem)
    prob_mod = body("gain", [helper.make_node("Mul", ["x", "gain"], ["y"])], elem=elem)
    shapes = [(1, 4, 3, 5), (1, 2, 4, 5), (1, 2, 4, 3)]
    bias, gain = tensors([(3, 4), (1, 4, 3, 1)], np.float64, seed=1)
    model = model_of(shapes, np.float64, {"score_mod": score_mod, "prob_mod": prob_mod},
                     [numpy_helper.from_array(bias, "bias"),
                      numpy_helper.from_array(gain, "gain")])
    op, outer = operator_of(model)
    values = {"bias": bias, "gain": gain}
    check_gradient(op, tensors(shapes, np.float64) + [values[n] for n in outer])


@pytest.mark.parametrize("shapes", [PLAIN, [(1, 4, 3, 8), (1, 2, 6, 8), (1, 2, 6, 5)]])
def test_gradients_without_bodies(shapes):
    check_gradient(create_operator("FlexAttention", scale=0.7),
                   tensors(shapes, np.float64))


def test_heads_must_group():
    with pytest.raises(ShapeError, match="Hq a multiple of Hkv"):
        create_operator("FlexAttention").forward(*tensors([(1, 3, 2, 4), (1, 2, 2, 4),
                                                           (1, 2, 2, 4)], np.float32))
