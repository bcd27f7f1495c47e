"""String tensors in the TensorFlow executor: fed and fetched as NumPy object arrays of
``str`` (``tf.string`` inside, UTF-8), and the operators on them (``ops/text.py``:
RegexFullMatch, StringConcat, StringNormalizer, StringSplit; ``ops/ml.py``: LabelEncoder;
``ops/logic.py``: Equal), in both modes, against ONNX's ReferenceEvaluator. Strings are
compared exactly."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

tf = pytest.importorskip("tensorflow")

import deep500.frameworks.tensorflow as d5tf  # noqa: E402

OPSET = onnx.defs.onnx_opset_version()
MODES = ["eager", "function"]


def strings(*values, shape=None):
    array = np.array(values, dtype=object)
    return array if shape is None else array.reshape(shape)


def info(name, value):
    value = np.asarray(value)
    element = TensorProto.STRING if value.dtype == object else \
        helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, element, value.shape)


def model_of(node, feeds: dict, outputs: list, domains=()):
    graph = helper.make_graph([node], "strings", [info(n, v) for n, v in feeds.items()],
                              outputs)
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, v)
                                                 for d, v in domains]
    return helper.make_model(graph, opset_imports=opsets)


def check(node, feeds: dict, mode: str, domains=()):
    """The executor's outputs equal the evaluator's: same dtype, shape and values."""
    untyped = [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None)
               for name in node.output]
    expected = ReferenceEvaluator(model_of(node, feeds, untyped, domains)).run(None, feeds)
    typed = [helper.make_tensor_value_info(name, info(name, want).type.tensor_type.elem_type,
                                           [None] * want.ndim)
             for name, want in zip(node.output, expected)]
    got = d5tf.from_onnx(model_of(node, feeds, typed, domains), mode=mode).inference(feeds)
    for name, want in zip(node.output, expected):
        if want.dtype.kind in "OU":   # the evaluator returns some as NumPy str arrays
            want = want.astype(object)
        assert got[name].dtype == want.dtype, name
        assert got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x,y", [
    (strings("abc", "d\u00e9f"), strings(".com", "\u7684")),
    (strings("cat", "dog", "snake"), strings("s")),
    (strings("cat", shape=()), strings("s", shape=())),
    (strings("a", "", "b", "c", shape=(2, 2)), strings("", "x"))])
def test_string_concat_broadcasts(x, y, mode):
    check(helper.make_node("StringConcat", ["x", "y"], ["z"]), {"x": x, "y": y}, mode)


@pytest.mark.parametrize("mode", MODES)
def test_equal_on_strings(mode):
    check(helper.make_node("Equal", ["x", "y"], ["z"]),
          {"x": strings("a", "b", "\u00e9"), "y": strings("a", "c", "\u00e9")}, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pattern,x", [
    (r"www\.[\w.-]+\.\bcom\b", strings("www.google.com", "www.bbc.co.uk", "x")),
    (r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
     strings("a@gmail.com", "b@hotmail.com", "no", "c@yahoo.com", shape=(2, 2))),
    (r"a+", np.zeros((2, 0), object))])
def test_regex_full_match(pattern, x, mode):
    check(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=pattern), {"x": x}, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attributes,x", [
    ({"case_change_action": "LOWER", "is_case_sensitive": 1, "stopwords": ["monday"]},
     strings("monday", "Tuesday", "WED")),
    ({"case_change_action": "UPPER", "stopwords": ["monday"]},
     strings("Monday", "tuesday", "MONDAY", shape=(1, 3))),
    ({"case_change_action": "UPPER", "is_case_sensitive": 1, "stopwords": ["monday"]},
     strings("monday", "monday")),
    ({"is_case_sensitive": 1}, strings("monday", "tuesday"))])
def test_string_normalizer(attributes, x, mode):
    check(helper.make_node("StringNormalizer", ["x"], ["y"], **attributes), {"x": x}, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attributes,x", [
    ({"delimiter": "."}, strings("abc.com", "def.net")),
    ({"delimiter": "-"}, strings("o-n-n--x-", "o-n----nx")),
    ({"delimiter": ""}, strings("hello world !", "  hello   world !", " a  ")),
    ({}, np.zeros((0,), object)),
    ({"maxsplit": 2}, strings("hello world", "def.net", "o n n x", "the quick brown fox",
                              shape=(2, 2))),
    ({"delimiter": "ab", "maxsplit": 1}, strings("xabyabz", "ab", ""))])
def test_string_split(attributes, x, mode):
    check(helper.make_node("StringSplit", ["x"], ["y", "z"], **attributes), {"x": x}, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attributes,x", [
    ({"keys_strings": ["a", "b", "c"], "values_int64s": [0, 1, 2], "default_int64": 42},
     strings("a", "b", "d", "c", "g")),
    ({"keys_strings": ["a", "b"], "values_floats": [0.5, 1.5]}, strings("a", "z", "b")),
    ({"keys_int64s": [7, 3], "values_strings": ["seven", "three"]},
     np.array([[3, 7], [1, 3]], np.int64)),
    ({"keys_tensor": helper.make_tensor("k", TensorProto.STRING, [3], [b"a", b"b", b"c"]),
      "values_tensor": helper.make_tensor("v", TensorProto.INT16, [3], [0, 1, 2]),
      "default_tensor": helper.make_tensor("d", TensorProto.INT16, [1], [42])},
     strings("a", "b", "d", "c", "g"))])
def test_label_encoder(attributes, x, mode):
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attributes)
    check(node, {"x": x}, mode, domains=[("ai.onnx.ml", 4)])


@pytest.mark.parametrize("mode", MODES)
def test_label_encoder_maps_a_nan_key(mode):
    """Keys are compared bit for bit, so a NaN key maps NaN (the operator's page; ONNX's
    evaluator does not, Deep500's reference executor does)."""
    x = np.array([0.5, np.nan, 2.0], np.float32)
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                            keys_floats=[0.5, float("nan")], values_int64s=[1, 2])
    model = model_of(node, {"x": x}, [helper.make_tensor_value_info("y", TensorProto.INT64,
                                                                    [3])],
                     [("ai.onnx.ml", 4)])
    got = d5tf.from_onnx(model, mode=mode).inference({"x": x})["y"]
    np.testing.assert_array_equal(got, np.array([1, 2, -1], np.int64))
