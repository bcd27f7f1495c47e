"""Every ONNX operator's family: where its visitor lives in each framework bridge.

A bridge keeps the ``visit_<op>`` methods of one family in ``ops/<family>.py``, under the
same file name in every bridge (as onnxruntime keeps ``providers/cpu/math/softmax.cc``
and ``providers/cuda/math/softmax.cc``), so an operator's every implementation is found
at one relative path without searching. The reference operators are one file each
(``frameworks/reference/operators/op_<name>.py``) and carry their family here too.

Adding an operator is: its reference ``op_<name>.py``, one line below, and its visitor in
``ops/<family>.py`` of each bridge that runs it (``docs/frameworks.md``).
``tests/frameworks/test_families.py`` fails when a visitor sits in another family's file,
when a bridge holds a file outside the families, or when an operator has no family.

The families follow the operator index of the ONNX specification
(https://onnx.ai/onnx/operators/), split where one group would hold too much.
"""
from __future__ import annotations

from deep500.utils.errors import Deep500Error

# family -> (what it holds, its operators). Operator names are unique across the ONNX
# domains Deep500 reads (ai.onnx, ai.onnx.ml, ai.onnx.preview, ai.onnx.preview.training).
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "math": ("elementwise arithmetic and functions of one number", (
        "Abs", "Acos", "Acosh", "Add", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Clip",
        "Cos", "Cosh", "Div", "Erf", "Exp", "Floor", "Log", "Max", "Mean", "Min", "Mod",
        "Mul", "Neg", "Pow", "Reciprocal", "Round", "Sign", "Sin", "Sinh", "Sqrt", "Sub",
        "Sum", "Tan", "Tanh")),
    "logic": ("comparison, logical and bitwise operators, selection", (
        "And", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Equal",
        "Greater", "GreaterOrEqual", "IsInf", "IsNaN", "Less", "LessOrEqual", "Not", "Or",
        "Where", "Xor")),
    "linalg": ("matrix products and linear algebra", (
        "Det", "Einsum", "Gemm", "MatMul")),
    "activation": ("activation functions and the softmax family", (
        "Celu", "Elu", "Gelu", "HardSigmoid", "HardSwish", "Hardmax", "LeakyRelu",
        "LogSoftmax", "Mish", "PRelu", "Relu", "Selu", "Shrink", "Sigmoid", "Softmax",
        "Softplus", "Softsign", "SwiGLU", "Swish", "ThresholdedRelu")),
    "conv": ("convolutions and their inverses", (
        "CausalConvWithState", "Col2Im", "Conv", "ConvTranspose", "DeformConv")),
    "pooling": ("pooling and unpooling", (
        "AveragePool", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "LpPool",
        "MaxPool", "MaxUnpool")),
    "normalization": ("normalization layers", (
        "BatchNormalization", "GroupNormalization", "InstanceNormalization", "LRN",
        "LayerNormalization", "LpNormalization", "MeanVarianceNormalization",
        "RMSNormalization")),
    "tensor": ("creating tensors and changing their element type", (
        "BitCast", "Cast", "CastLike", "Constant", "ConstantOfShape", "EyeLike",
        "Identity", "Range")),
    "shape": ("reshaping, joining, splitting, slicing and padding", (
        "CenterCropPad", "Concat", "DepthToSpace", "Expand", "Flatten", "Pad", "Reshape",
        "Shape", "Size", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "Transpose",
        "Trilu", "Unsqueeze")),
    "index": ("gathering, scattering and selecting by index", (
        "Compress", "Gather", "GatherElements", "GatherND", "NonZero", "OneHot",
        "ReverseSequence", "Scatter", "ScatterElements", "ScatterND", "TensorScatter",
        "Unique")),
    "reduction": ("reductions over axes, arg-reductions, top-k and cumulative scans", (
        "ArgMax", "ArgMin", "CumProd", "CumSum", "ReduceL1", "ReduceL2", "ReduceLogSum",
        "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
        "ReduceSum", "ReduceSumSquare", "TopK")),
    "recurrent": ("recurrent layers", ("GRU", "LSTM", "RNN")),
    "attention": ("attention and positional encodings", (
        "Attention", "FlexAttention", "LinearAttention", "RotaryEmbedding")),
    "control": ("control flow over nested graphs", ("If", "Loop", "Scan")),
    "sequence": ("sequence- and optional-typed values", (
        "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement",
        "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
        "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence")),
    "quantization": ("quantized arithmetic and (de)quantization", (
        "ConvInteger", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
        "QLinearConv", "QLinearMatMul", "QuantizeLinear")),
    "resample": ("resampling and geometric transforms of images", (
        "AffineGrid", "GridSample", "Resize", "Upsample")),
    "detection": ("object-detection operators", (
        "MaxRoiPool", "NonMaxSuppression", "RoiAlign")),
    "signal": ("spectral transforms and windows", (
        "BlackmanWindow", "DFT", "HammingWindow", "HannWindow", "MelWeightMatrix", "STFT")),
    "loss": ("loss functions", ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")),
    "random": ("random generators and dropout", (
        "Bernoulli", "Dropout", "Multinomial", "RandomNormal", "RandomNormalLike",
        "RandomUniform", "RandomUniformLike")),
    "text": ("string operators and text features", (
        "RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit",
        "TfIdfVectorizer")),
    "image": ("image decoding", ("ImageDecoder",)),
    "ml": ("classical machine learning (domain ai.onnx.ml)", (
        "ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper",
        "DictVectorizer", "FeatureVectorizer", "Imputer", "LabelEncoder",
        "LinearClassifier", "LinearRegressor", "Normalizer", "OneHotEncoder",
        "SVMClassifier", "SVMRegressor", "Scaler", "TreeEnsemble",
        "TreeEnsembleClassifier", "TreeEnsembleRegressor", "ZipMap")),
    "training": ("optimizer steps and gradients (domain ai.onnx.preview.training)", (
        "Adagrad", "Adam", "Gradient", "Momentum")),
}

_FAMILY_OF = {op: family for family, (_, ops) in FAMILIES.items() for op in ops}
_BY_LOWER = {op.lower(): op for op in _FAMILY_OF}


class UnknownOperatorFamily(Deep500Error):
    """An operator that ``FAMILIES`` does not list."""


def family_names() -> list[str]:
    """The families, in the order above: the file names ``ops/<family>.py`` may take."""
    return list(FAMILIES)


def operators_of(family: str) -> tuple[str, ...]:
    """The ONNX operators of ``family``."""
    if family not in FAMILIES:
        raise UnknownOperatorFamily(f"no operator family {family!r}; the families are "
                                    f"{', '.join(FAMILIES)} (deep500/frameworks/families.py)")
    return FAMILIES[family][1]


def family_of(op_type: str) -> str:
    """The family of ONNX operator ``op_type``; a visitor method's name without
    ``visit_`` (lower case) is accepted too."""
    name = op_type if op_type in _FAMILY_OF else _BY_LOWER.get(op_type.lower())
    if name is None:
        raise UnknownOperatorFamily(
            f"ONNX operator {op_type!r} has no family: add it to FAMILIES in "
            f"deep500/frameworks/families.py (one line), then put its visitor in "
            f"ops/<family>.py of each bridge")
    return _FAMILY_OF[name]


def operator_name(lower: str) -> str:
    """The ONNX spelling of an operator named in lower case (``visit_<lower>``)."""
    family_of(lower)
    return _BY_LOWER[lower.lower()]


__all__ = ["FAMILIES", "UnknownOperatorFamily", "family_names", "family_of",
           "operator_name", "operators_of"]
