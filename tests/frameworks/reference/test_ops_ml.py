"""The classical-ML operators of domain ai.onnx.ml (ArrayFeatureExtractor, Binarizer,
LabelEncoder, TreeEnsemble) against ONNX's ReferenceEvaluator, and against onnxruntime
where that evaluator departs from the spec (it matches no NaN key, and gives ±FLT_MAX to
a target no leaf reaches under min/max aggregation, where onnxruntime gives 0);
TreeEnsemble's post transforms (which that evaluator ignores) against their formulas;
ArrayFeatureExtractor's gradient against central finite differences."""
import math

import numpy as np
import pytest
from onnx import numpy_helper

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run, onnxruntime_run
from tests.frameworks.reference.op_checks import check_gradient

ML = "ai.onnx.ml"


def check(op_type, inputs, attributes, domain_opset=1, oracle=onnx_run, **tolerance):
    """Equal to the oracle's (attributes given to it as ONNX takes them; tensors as
    TensorProto there, as NumPy arrays to the reference, as the parser hands them)."""
    onnx_attributes = {k: numpy_helper.from_array(v, k) if isinstance(v, np.ndarray) else v
                       for k, v in attributes.items()}
    expected, = oracle(op_type, inputs, onnx_attributes, domain=ML,
                       domain_opset=domain_opset)
    got = create_operator(op_type, **attributes).forward(*inputs)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype or got.dtype.kind in "OU" and expected.dtype.kind in "OU"
    if got.dtype.kind in "fc":
        np.testing.assert_allclose(got, expected, **tolerance)
    else:
        np.testing.assert_array_equal(got, expected)
    return got


@pytest.mark.parametrize("shape,indices", [((3, 4), [0, 3]), ((2, 2, 5), [[4, 0, 4]]),
                                           ((6,), [5, 1])])
def test_array_feature_extractor(shape, indices):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    check("ArrayFeatureExtractor", [x, np.array(indices, np.int64)], {})


def test_array_feature_extractor_gradient_and_errors():
    x = np.random.default_rng(0).standard_normal((2, 5))
    check_gradient(create_operator("ArrayFeatureExtractor"), [x, np.array([4, 0, 4])])
    with pytest.raises(ShapeError, match=r"must lie in \[0, 5\)"):
        create_operator("ArrayFeatureExtractor").forward(x, np.array([5]))


@pytest.mark.parametrize("threshold", [0.0, 0.5, -1.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_binarizer(threshold, dtype):
    x = (np.random.default_rng(1).standard_normal((3, 4)) * 2).astype(dtype)
    check("Binarizer", [x], {"threshold": threshold})


KEYS = ["a", "b", "c", "a"]


@pytest.mark.parametrize("attributes", [
    {"keys_strings": KEYS, "values_int64s": [1, 2, 3, 4], "default_int64": 9},
    {"keys_strings": KEYS, "values_floats": [0.5, 1.5, 2.5, 3.5]},
    {"keys_strings": KEYS, "values_strings": ["x", "y", "z", "w"], "default_string": "?"},
    {"keys_strings": KEYS, "values_tensor": np.array([1, 2, 3, 4], np.int16),
     "default_tensor": np.array([7], np.int16)},
    {"keys_tensor": np.array(KEYS, dtype=object), "values_int64s": [1, 2, 3, 4]}])
def test_label_encoder_of_strings(attributes):
    check("LabelEncoder", [np.array(["a", "c", "q", "b", "a"], dtype=object)], attributes,
          domain_opset=4)


def test_label_encoder_of_floats_matches_nan_keys():
    attributes = {"keys_floats": [1.5, math.nan, -2.0], "values_strings": ["p", "nan", "m"]}
    x = np.array([-2.0, np.nan, 1.5, 0.0], np.float32)
    pytest.importorskip("onnxruntime")
    got = check("LabelEncoder", [x], attributes, domain_opset=4, oracle=onnxruntime_run)
    assert got.tolist() == ["m", "nan", "p", "_Unused"]


def test_label_encoder_needs_paired_keys():
    with pytest.raises(Deep500Error, match="3 keys but 2 values"):
        create_operator("LabelEncoder", keys_int64s=[1, 2, 3], values_int64s=[1, 2])


def forest(aggregate=1, post_transform=0, modes=(0, 1, 6, 3)):
    """Two trees over three features, four leaves, two targets: tree 0 is nodes 0-2
    (node 2 a set-membership test where ``modes`` says so), tree 1 node 3."""
    return {
        "aggregate_function": aggregate, "post_transform": post_transform,
        "tree_roots": [0, 3], "n_targets": 2,
        "nodes_modes": np.array(modes, np.uint8),
        "nodes_featureids": [0, 1, 2, 0],
        "nodes_splits": np.array([0.5, -0.25, 0.0, 1.0], np.float32),
        "nodes_truenodeids": [1, 0, 1, 2], "nodes_trueleafs": [0, 1, 1, 1],
        "nodes_falsenodeids": [2, 1, 2, 3], "nodes_falseleafs": [0, 1, 1, 1],
        "nodes_missing_value_tracks_true": [1, 0, 0, 0],
        "leaf_weights": np.array([1.5, -2.0, 4.0, 0.25], np.float32),
        "leaf_targetids": [0, 1, 1, 0],
        **({"membership_values": np.array([1.0, 2.0, np.nan], np.float32)}
           if 6 in modes else {})}


X = np.array([[0.2, -1.0, 2.0], [0.7, 0.0, 1.0], [np.nan, 0.5, 5.0], [3.0, 1.0, 2.0],
              [0.9, -0.5, 0.5]], np.float32)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("modes", [(0, 1, 6, 3), (2, 4, 5, 0)])
def test_tree_ensemble_matches_onnx(aggregate, modes):
    oracle = onnx_run
    if aggregate in (2, 3):
        pytest.importorskip("onnxruntime")
        oracle = onnxruntime_run
    check("TreeEnsemble", [X], forest(aggregate, modes=modes), domain_opset=5,
          oracle=oracle, rtol=1e-6, atol=0)


def test_tree_ensemble_post_transforms():
    raw = create_operator("TreeEnsemble", **forest()).forward(X).astype(np.float64)
    for transform, expected in [
            (1, np.exp(raw) / np.exp(raw).sum(1, keepdims=True)),
            (2, 1.0 / (1.0 + np.exp(-raw))),
            (4, np.array([[math.sqrt(2) * _erfinv(2 * p - 1) if 0 < p < 1 else
                           -np.inf if p == 0 else np.nan for p in row] for row in raw]))]:
        got = create_operator("TreeEnsemble", **forest(post_transform=transform)).forward(X)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    zeros = create_operator("TreeEnsemble", **forest(post_transform=3)).forward(X)
    np.testing.assert_array_equal(zeros == 0, raw == 0)
    np.testing.assert_allclose(zeros.sum(1), 1.0, rtol=1e-6)


def _erfinv(y: float) -> float:
    """erf⁻¹ by bisection (the probit's definition, independent of statistics.NormalDist)."""
    low, high = -6.0, 6.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if math.erf(middle) < y else (low, middle)
    return (low + high) / 2
