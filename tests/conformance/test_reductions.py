"""How many terms an operator's output element sums, read from shapes and attributes."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.case.test_case import TestCase

from deep500 import conformance as conf


def model_of(op_type, inputs, attributes=None, expanded=False):
    """A one-node model (or, ``expanded``, a graph with the same inputs and two nodes
    standing in for the function body) over float inputs named as in ``inputs``."""
    names = list(inputs)
    nodes = ([helper.make_node("Identity", [names[0]], ["t"]),
              helper.make_node("Relu", ["t"], ["y"])] if expanded else
             [helper.make_node(op_type, names, ["y"], **(attributes or {}))])
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph)


def length(op_type, shapes, attributes=None, expanded=False):
    values = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    return conf.reduction_length(op_type, model_of(op_type, shapes, attributes, expanded),
                                 values)


@pytest.mark.parametrize("op_type, shapes, attributes, expected", [
    ("MatMul", {"a": (5, 2, 3), "b": (3, 4)}, None, 3),
    ("Gemm", {"a": (2, 7), "b": (7, 4)}, None, 7),
    ("Gemm", {"a": (7, 2), "b": (7, 4)}, {"transA": 1}, 7),
    ("Conv", {"x": (1, 8, 9, 9), "w": (4, 2, 3, 3)}, {"group": 4}, 18),
    ("CausalConvWithState", {"x": (2, 4, 8), "w": (4, 1, 4)}, None, 4),
    ("Attention", {"Q": (2, 3, 4, 8), "K": (2, 3, 6, 8), "V": (2, 3, 6, 8)}, None, 14),
    ("Attention", {"Q": (2, 4, 24), "K": (2, 6, 24), "V": (2, 6, 24)},
     {"q_num_heads": 3, "kv_num_heads": 3}, 8 + 6),
    ("Attention", {"Q": (2, 3, 4, 8), "K": (2, 3, 6, 8), "V": (2, 3, 6, 8), "mask": (4, 11),
                   "past_key": (2, 3, 5, 8)}, None, 8 + 6 + 5),
    ("FlexAttention", {"Q": (2, 4, 8, 16), "K": (2, 4, 6, 16), "V": (2, 4, 6, 16)}, None, 22),
    ("LinearAttention", {"q": (2, 4, 64), "k": (2, 4, 32), "v": (2, 4, 32)},
     {"q_num_heads": 2, "kv_num_heads": 2}, 4 + 16),
    ("Einsum", {"a": (2, 3, 4), "b": (2, 4, 5)}, {"equation": "bij,bjk->bik"}, 4),
    ("Einsum", {"a": (3, 4), "b": (4, 5)}, {"equation": "ij,jk"}, 4),
    ("Einsum", {"a": (7, 2, 3, 4)}, {"equation": "...ij->..."}, 12),
    ("Einsum", {"a": (3, 3)}, {"equation": "ii"}, 3),
    ("Relu", {"x": (3, 4)}, None, 0),
])
def test_reduction_lengths(op_type, shapes, attributes, expected):
    assert length(op_type, shapes, attributes) == expected


def test_an_expanded_body_reads_its_graph_inputs_in_order():
    shapes = {"Q": (2, 3, 4, 8), "K": (2, 3, 6, 8), "V": (2, 3, 6, 8)}
    assert length("Attention", shapes, expanded=True) == 14


def test_an_expanded_case_takes_its_twins_length():
    """A 3D attention's body has no q_num_heads: its twin's node says the head size."""
    shapes = {"Q": (2, 4, 24), "K": (2, 6, 24), "V": (2, 6, 24)}
    data = [([np.zeros(s, np.float32) for s in shapes.values()], [np.zeros((2, 4, 24))])]
    twins = [TestCase(name=name, model_name=name, url=None, model_dir=None,
                      model=model_of("Attention", shapes, {"q_num_heads": 3},
                                     expanded=name.endswith("expanded")),
                      data_sets=data, kind="node", rtol=1e-3, atol=1e-7)
             for name in ("test_attention_3d", "test_attention_3d_expanded")]
    cases = conf.load_cases(test_cases=twins)
    assert [(c.op_type, c.reduction_length) for c in cases] == [("Attention", 14)] * 2
    assert cases[1].tolerance.reduction_length == 14
    alone = conf.load_cases(test_cases=twins[1:])[0]
    assert alone.reduction_length == 24 + 6     # the packed hidden size bounds the head's


@pytest.mark.parametrize("op_type, shapes", [
    ("MatMul", {"a": ()}),
    ("Gemm", {"a": (3,)}),
    ("Attention", {"Q": (2, 3, 4, 8), "K": (2, 6, 24)}),
    ("Attention", {"Q": (2, 3, 4, 8), "K": (2, 3, 6, 8), "V": (2, 3, 6, 8), "m": (4, 6),
                   "lengths": (2,)}),
    ("LinearAttention", {"q": (2, 4), "k": (2, 4)}),
])
def test_shapes_that_do_not_fit_the_rule_count_no_more_than_they_show(op_type, shapes):
    """An expanded body's inputs are matched by position, which may not be the operator's
    (an optional input left out): the rule reads nothing it cannot."""
    expected = 14 if len(shapes) == 5 else 0
    assert length(op_type, shapes, expanded=True) == expected
