"""The PyTorch executor's string operators (``deep500/frameworks/pytorch/ops/text.py``,
LabelEncoder and Equal on strings): string tensors carried as NumPy arrays of str, fed
and fetched as such, each operator against onnx's ReferenceEvaluator (exact: strings,
booleans and integers)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

import onnx  # noqa: E402
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import deep500.frameworks.pytorch as d5pt  # noqa: E402

WORDS = np.array([["monday", "Tuesday"], ["wed nesday", "thursday"]], dtype=object)


def value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def check(node, inputs: dict, outputs: dict, opset=20, domain_opset=None):
    """Run one node on the executor and on onnx's evaluator; every output equal."""
    declared = [value(n, onnx.TensorProto.STRING if a.dtype == object
                      else helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                for n, a in inputs.items()]
    imports = [helper.make_opsetid("", opset)] + (
        [helper.make_opsetid("ai.onnx.ml", domain_opset)] if domain_opset else [])
    probe = helper.make_model(helper.make_graph([node], "text", declared, []),
                              opset_imports=imports, ir_version=10)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    graph = helper.make_graph([node], "text", declared,
                              [inferred.get(n) or value(n, elem, None)
                               for n, elem in outputs.items()])
    proto = helper.make_model(graph, opset_imports=imports, ir_version=10)
    want = ReferenceEvaluator(proto).run(None, inputs)
    got = d5pt.from_onnx(proto).inference(inputs)
    for name, expected in zip(outputs, want):
        result = np.asarray(got[name])
        assert result.shape == expected.shape, (name, result.shape, expected.shape)
        assert result.dtype.kind == expected.dtype.kind or {
            result.dtype.kind, expected.dtype.kind} <= {"O", "U"}, name
        assert result.tolist() == expected.tolist(), name
    return got


def test_string_concat_broadcasts():
    check(helper.make_node("StringConcat", ["x", "y"], ["z"]),
          {"x": WORDS, "y": np.array(["!", "?"], dtype=object)}, {"z": TP.STRING})


@pytest.mark.parametrize("pattern", [r"[a-z]+day", r"(\W|^)[\w.\-]*@(a|b)\.com", r".*"])
def test_regex_full_match(pattern):
    x = np.array(["monday", "Monday", "x@a.com", "x@c.com", ""], dtype=object)
    check(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern), {"x": x},
          {"y": TP.BOOL})


@pytest.mark.parametrize("delimiter,maxsplit", [(None, None), (" ", None), ("e", 1),
                                                ("", 2)])
def test_string_split(delimiter, maxsplit):
    attributes = {k: v for k, v in (("delimiter", delimiter), ("maxsplit", maxsplit))
                  if v is not None}
    x = np.array([["a b  c", ""], ["tree house", " lead "]], dtype=object)
    check(helper.make_node("StringSplit", ["x"], ["parts", "counts"], **attributes),
          {"x": x}, {"parts": TP.STRING, "counts": TP.INT64})


@pytest.mark.parametrize("case,sensitive,stopwords,two_d", [
    ("LOWER", 1, ["monday"], False), ("UPPER", 0, ["MONDAY", "thursday"], True),
    ("NONE", 1, [], False), ("LOWER", 0, ["monday", "tuesday", "wed", "nesday",
                                          "thursday"], True)],
    ids=["lower_sensitive", "upper_insensitive_2d", "none", "all_removed_2d"])
def test_string_normalizer(case, sensitive, stopwords, two_d):
    x = np.array(["monday", "Tuesday", "wed nesday", "thursday"], dtype=object)
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action=case,
                            is_case_sensitive=sensitive,
                            **({"stopwords": stopwords} if stopwords else {}))
    check(node, {"x": x.reshape(1, -1) if two_d else x}, {"y": TP.STRING})


def test_equal_on_strings_broadcasts():
    check(helper.make_node("Equal", ["x", "y"], ["z"]),
          {"x": WORDS, "y": np.array(["monday", "thursday"], dtype=object)}, {"z": TP.BOOL})


@pytest.mark.parametrize("values,default", [
    ({"values_int64s": [7, 8, 9]}, {"default_int64": 42}),
    ({"values_int64s": [7, 8, 9]}, {}),
    ({"values_floats": [0.5, -1.0, 2.0]}, {"default_float": 3.0}),
    ({"values_strings": ["x", "y", "z"]}, {"default_string": "?"}),
    ({"values_tensor": numpy_helper.from_array(np.array([1, 2, 3], np.int16))},
     {"default_tensor": numpy_helper.from_array(np.array([-5], np.int16))})],
    ids=["int64", "int64_no_default", "float", "string", "tensor"])
def test_label_encoder_maps_strings(values, default):
    x = np.array([["b", "a"], ["q", "c"]], dtype=object)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_strings=["a", "b", "c"], **values, **default)
    kind = next(iter(values))
    out = {"values_int64s": TP.INT64, "values_floats": TP.FLOAT,
           "values_strings": TP.STRING, "values_tensor": TP.INT16}[kind]
    check(node, {"x": x}, {"y": out}, domain_opset=4)


def test_label_encoder_maps_integers_to_strings():
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_int64s=[3, 1], values_strings=["three", "one"])
    check(node, {"x": np.array([1, 2, 3], np.int64)}, {"y": TP.STRING}, domain_opset=4)
