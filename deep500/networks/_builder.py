"""The ONNX graph builder that every model of the zoo is written with.

Models are plain ONNX (default domain, opset :data:`OPSET`, IR version :data:`IR_VERSION`,
the newest pair that every supported runtime reads): ``Conv``, ``BatchNormalization`` in
inference form, ``Relu``, ``MaxPool``, ``AveragePool``, ``GlobalAveragePool``,
``Flatten``, ``Gemm``, ``Add``, ``Concat``. The builder tracks the per-sample shape of
every tensor it creates, so layers ask for the number of output units only and a size
that falls below one element is a :class:`ShapeError` at construction time, not a
runtime failure.

Initial weights come from one ``numpy.random.default_rng(seed)`` drawn in construction
order, so a seed determines every byte of the model:

* convolution kernels: He (Kaiming) normal, std = sqrt(2 / fan_in) with fan_in =
  C_in·k_h·k_w (He et al., "Delving Deep into Rectifiers", ICCV 2015, eq. 10);
  convolution biases zero;
* fully connected layers (``Gemm``, weight stored as (out, in) with transB=1): weight and
  bias uniform in ±1/sqrt(fan_in);
* batch normalisation: scale 1, bias 0, running mean 0, running variance 1.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deep500.utils.errors import Deep500Error, ShapeError

OPSET = 17
IR_VERSION = 8  # the IR version that introduced opset 17 (ONNX 1.12)
PRODUCER = "deep500"

DTYPES = {"float32": (np.float32, TensorProto.FLOAT),
          "float64": (np.float64, TensorProto.DOUBLE)}

BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


def _batch_dim(batch_size):
    if isinstance(batch_size, str) and batch_size:
        return batch_size
    if isinstance(batch_size, (int, np.integer)) and not isinstance(batch_size, bool) \
            and batch_size > 0:
        return int(batch_size)
    raise Deep500Error(f"batch_size must be a positive int or a symbolic name such as "
                       f"'N', not {batch_size!r}")


class GraphBuilder:
    """Accumulates nodes and initializers of one ONNX graph.

    Every layer method takes the name of its input tensor and returns the name of its
    output tensor. Node names are unique (a repeated name gets a ``_1``, ``_2`` suffix);
    a node's output tensor has the node's name and its parameters are named
    ``<node>.<parameter>``.

    Args:
        name: the graph's (and the model's) name.
        input_shape: per-sample shape of the input, e.g. (C, H, W).
        batch_size: int, or a symbolic dimension name such as "N".
        dtype: "float32" or "float64".
        seed: seed of the ``numpy.random.default_rng`` that draws the initial weights.
    """

    def __init__(self, name: str, input_shape, batch_size="N", dtype: str = "float32",
                 seed: int = 0, input_name: str = "input"):
        if dtype not in DTYPES:
            raise Deep500Error(f"model {name!r}: dtype must be one of {sorted(DTYPES)}, "
                               f"not {dtype!r}")
        self.name = name
        self.np_dtype, self.onnx_dtype = DTYPES[dtype]
        self.batch = _batch_dim(batch_size)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self._used: set[str] = set()
        input_shape = tuple(int(d) for d in input_shape)
        if not input_shape or min(input_shape) < 1:
            raise ShapeError(f"model {name!r}: input_shape must be positive sizes without "
                             f"the batch dimension, e.g. (3, 32, 32); got {input_shape}")
        self.input = self._unique(input_name)
        self.shapes[self.input] = input_shape
        # Sequence models feed int64 token ids (see token_input); others feed ``dtype``.
        self.input_elem_type = self.onnx_dtype

    # -- bookkeeping ---------------------------------------------------------------
    def _unique(self, base: str) -> str:
        name, index = base, 0
        while name in self._used:
            index += 1
            name = f"{base}_{index}"
        self._used.add(name)
        return name

    def _param(self, node: str, suffix: str, value: np.ndarray) -> str:
        name = f"{node}.{suffix}"
        self._used.add(name)
        self.initializers.append(
            numpy_helper.from_array(np.asarray(value, dtype=self.np_dtype), name))
        return name

    def _node(self, op_type: str, inputs, name: str, shape, **attributes) -> str:
        if min(shape) < 1:
            raise ShapeError(f"model {self.name!r}: node '{name}' ({op_type}) would produce "
                             f"per-sample shape {tuple(shape)}, which is empty; the input "
                             f"shape {self.shapes[self.input]} is too small for this model. "
                             f"Use a larger input_shape")
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name,
                                           **attributes))
        self.shapes[name] = tuple(int(d) for d in shape)
        return name

    def channels(self, x: str) -> int:
        return self.shapes[x][0]

    # -- layers --------------------------------------------------------------------
    def conv(self, x: str, channels: int, kernel, stride=1, pad=0, bias: bool = False,
             name: str = "conv") -> str:
        """2-D convolution with He-normal weights (zero bias when ``bias``)."""
        name = self._unique(name)
        c_in, height, width = self.shapes[x]
        (kh, kw), (sh, sw), (ph, pw) = _pair(kernel), _pair(stride), _pair(pad)
        std = math.sqrt(2.0 / (c_in * kh * kw))
        inputs = [x, self._param(name, "weight",
                                 self.rng.standard_normal((channels, c_in, kh, kw)) * std)]
        if bias:
            inputs.append(self._param(name, "bias", np.zeros(channels)))
        shape = (channels, (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1)
        return self._node("Conv", inputs, name, shape, kernel_shape=[kh, kw],
                          strides=[sh, sw], pads=[ph, pw, ph, pw])

    def batchnorm(self, x: str, name: str = "bn", scale: float = 1.0) -> str:
        """Inference-form batch normalisation with identity statistics, bias 0 and every
        scale ``scale``."""
        name = self._unique(name)
        c = self.channels(x)
        inputs = [x, self._param(name, "scale", np.full(c, scale)),
                  self._param(name, "bias", np.zeros(c)),
                  self._param(name, "mean", np.zeros(c)),
                  self._param(name, "var", np.ones(c))]
        return self._node("BatchNormalization", inputs, name, self.shapes[x],
                          epsilon=BN_EPSILON, momentum=BN_MOMENTUM)

    def relu(self, x: str, name: str = "relu") -> str:
        return self._node("Relu", [x], self._unique(name), self.shapes[x])

    def add(self, a: str, b: str, name: str = "add") -> str:
        if self.shapes[a] != self.shapes[b]:
            raise ShapeError(f"model {self.name!r}: cannot add '{a}' {self.shapes[a]} and "
                             f"'{b}' {self.shapes[b]}")
        return self._node("Add", [a, b], self._unique(name), self.shapes[a])

    def maxpool(self, x: str, kernel, stride=None, pad=0, name: str = "pool") -> str:
        c, height, width = self.shapes[x]
        (kh, kw), (ph, pw) = _pair(kernel), _pair(pad)
        sh, sw = _pair(kernel if stride is None else stride)
        shape = (c, (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1)
        return self._node("MaxPool", [x], self._unique(name), shape, kernel_shape=[kh, kw],
                          strides=[sh, sw], pads=[ph, pw, ph, pw])

    def average_pool(self, x: str, kernel, stride=None, pad=0, name: str = "avgpool") -> str:
        """``AveragePool`` (padding not counted, the ONNX default).
        https://onnx.ai/onnx/operators/onnx__AveragePool.html"""
        c, height, width = self.shapes[x]
        (kh, kw), (ph, pw) = _pair(kernel), _pair(pad)
        sh, sw = _pair(kernel if stride is None else stride)
        shape = (c, (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1)
        return self._node("AveragePool", [x], self._unique(name), shape,
                          kernel_shape=[kh, kw], strides=[sh, sw], pads=[ph, pw, ph, pw])

    def concat(self, inputs, name: str = "concat") -> str:
        """``Concat`` of per-sample (C, H, W) tensors along the channel axis (axis 1).
        https://onnx.ai/onnx/operators/onnx__Concat.html"""
        inputs = list(inputs)
        spatial = {self.shapes[x][1:] for x in inputs}
        if len(spatial) != 1:
            raise ShapeError(f"model {self.name!r}: cannot concatenate "
                             f"{[(x, self.shapes[x]) for x in inputs]} along channels")
        shape = (sum(self.channels(x) for x in inputs), *spatial.pop())
        return self._node("Concat", inputs, self._unique(name), shape, axis=1)

    def global_average_pool(self, x: str, name: str = "avgpool") -> str:
        shape = (self.channels(x),) + (1,) * (len(self.shapes[x]) - 1)
        return self._node("GlobalAveragePool", [x], self._unique(name), shape)

    def flatten(self, x: str, name: str = "flatten") -> str:
        return self._node("Flatten", [x], self._unique(name), (math.prod(self.shapes[x]),),
                          axis=1)

    def gemm(self, x: str, units: int, name: str = "fc") -> str:
        """Fully connected layer Y = X·Wᵀ + b, W of shape (units, in)."""
        name = self._unique(name)
        (fan_in,) = self.shapes[x]
        bound = 1.0 / math.sqrt(fan_in)
        weight = self._param(name, "weight", self.rng.uniform(-bound, bound, (units, fan_in)))
        bias = self._param(name, "bias", self.rng.uniform(-bound, bound, units))
        return self._node("Gemm", [x, weight, bias], name, (units,), transB=1)

    # -- composites ----------------------------------------------------------------
    def conv_bn(self, x: str, channels: int, kernel, stride=1, pad=0, relu: bool = True,
                name: str = "conv", bn_scale: float = 1.0) -> str:
        """Conv (no bias) → BatchNormalization → optional Relu, named ``name.conv``,
        ``name.bn``, ``name.relu``."""
        name = self._unique(name)
        y = self.batchnorm(self.conv(x, channels, kernel, stride, pad, name=name + ".conv"),
                           name=name + ".bn", scale=bn_scale)
        return self.relu(y, name=name + ".relu") if relu else y

    def bn_relu(self, x: str, name: str) -> str:
        return self.relu(self.batchnorm(x, name=name + ".bn"), name=name + ".relu")

    # -- sequence layers -------------------------------------------------------------
    # Per-sample shapes of sequence tensors are (T, D): the batch axis stays first, so
    # reshapes write 0 ("copy this dimension") for it and work with a symbolic batch.
    def token_input(self) -> str:
        """Declares the graph input as int64 token ids (shape [batch, T]); returns it."""
        self.input_elem_type = TensorProto.INT64
        return self.input

    def constant(self, value, name: str = "const", dtype=None) -> str:
        """A ``Constant`` node (not an initializer, so it is never a trainable parameter);
        floating-point values take the model's dtype unless ``dtype`` is given.
        https://onnx.ai/onnx/operators/onnx__Constant.html"""
        value = np.asarray(value)
        if dtype is None:
            dtype = self.np_dtype if value.dtype.kind == "f" else value.dtype
        value = np.asarray(value, dtype=dtype)
        name = self._unique(name)
        self.nodes.append(helper.make_node("Constant", [], [name], name=name,
                                           value=numpy_helper.from_array(value, name)))
        self.shapes[name] = value.shape
        return name

    def node(self, op_type: str, inputs, shape, name: str, **attributes) -> str:
        """One ``op_type`` node whose output has per-sample shape ``shape``."""
        return self._node(op_type, inputs, self._unique(name), shape, **attributes)

    def positional_embedding(self, x: str, std: float = 1.0, name: str = "pos_embed") -> str:
        """``Add(x, P)`` with a learned position embedding P of x's per-sample shape
        (T, D), drawn from N(0, std²): every sequence has the model's fixed length T, so
        positions need no Gather of a Range."""
        name = self._unique(name)
        table = self._param(name, "weight", self.rng.standard_normal(self.shapes[x]) * std)
        return self._node("Add", [x, table], name, self.shapes[x])

    def embedding(self, tokens: str, vocab: int, dim: int, std: float = 1.0,
                  name: str = "embed") -> str:
        """Token embedding ``Gather(weight, tokens, axis=0)``, weight (vocab, dim) drawn
        from N(0, std²) (std 1 as ``torch.nn.Embedding``).
        https://onnx.ai/onnx/operators/onnx__Gather.html"""
        name = self._unique(name)
        weight = self._param(name, "weight", self.rng.standard_normal((vocab, dim)) * std)
        return self._node("Gather", [weight, tokens], name, (*self.shapes[tokens], dim),
                          axis=0)

    def linear(self, x: str, units: int, bias: bool = True, name: str = "linear") -> str:
        """``MatMul(x, W) + b`` over the last axis, W of shape (in, units) as
        ``torch.onnx.export`` writes ``nn.Linear`` on 3-D inputs; W and b uniform in
        ±1/sqrt(in)."""
        name = self._unique(name)
        *lead, fan_in = self.shapes[x]
        bound = 1.0 / math.sqrt(fan_in)
        weight = self._param(name, "weight", self.rng.uniform(-bound, bound, (fan_in, units)))
        shape = (*lead, units)
        if not bias:
            return self._node("MatMul", [x, weight], name, shape)
        product = self._node("MatMul", [x, weight], self._unique(name + ".matmul"), shape)
        return self._node("Add", [product, self._param(name, "bias", self.rng.uniform(
            -bound, bound, units))], name, shape)

    def layernorm(self, x: str, epsilon: float = 1e-5, name: str = "norm") -> str:
        """``LayerNormalization`` (opset 17) over the last axis, scale 1 and bias 0.
        https://onnx.ai/onnx/operators/onnx__LayerNormalization.html"""
        name = self._unique(name)
        width = self.shapes[x][-1]
        return self._node("LayerNormalization",
                          [x, self._param(name, "scale", np.ones(width)),
                           self._param(name, "bias", np.zeros(width))],
                          name, self.shapes[x], axis=-1, epsilon=epsilon)

    def gelu(self, x: str, name: str = "gelu") -> str:
        """GELU(x) = x·½(1 + erf(x/√2)) (Hendrycks & Gimpel, arXiv:1606.08415) as
        ``torch.onnx.export`` writes ``nn.GELU()`` at opset 17:
        ``Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), 0.5)``.
        https://onnx.ai/onnx/operators/onnx__Erf.html"""
        name = self._unique(name)
        shape = self.shapes[x]
        scaled = self.node("Div", [x, self.constant(math.sqrt(2.0), name + ".sqrt2")],
                           shape, name + ".div")
        erf = self.node("Erf", [scaled], shape, name + ".erf")
        plus = self.node("Add", [erf, self.constant(1.0, name + ".one")], shape,
                         name + ".add")
        product = self.node("Mul", [x, plus], shape, name + ".mul")
        return self._node("Mul", [product, self.constant(0.5, name + ".half")], name, shape)

    def lstm(self, x: str, hidden: int, name: str = "lstm") -> str:
        """One forward ``LSTM`` over batch-first x (per sample (T, E)) → its last hidden
        state (per sample (hidden,)): Transpose to time-major [T, N, E] (layout 0, as
        ``torch.onnx.export`` writes ``nn.LSTM``), LSTM, Squeeze of the direction axis
        of Y_h [1, N, hidden]. W (1, 4·hidden, E), R (1, 4·hidden, hidden) and
        B (1, 8·hidden) uniform in ±1/sqrt(hidden) as ``torch.nn.LSTM``, gates in ONNX
        order i, o, f, c. https://onnx.ai/onnx/operators/onnx__LSTM.html"""
        name = self._unique(name)
        steps, width = self.shapes[x]
        bound = 1.0 / math.sqrt(hidden)
        weights = [self._param(name, key, self.rng.uniform(-bound, bound, shape))
                   for key, shape in (("W", (1, 4 * hidden, width)),
                                      ("R", (1, 4 * hidden, hidden)), ("B", (1, 8 * hidden)))]
        # Time-major tensors: their recorded "per-sample" shapes only keep the sizes.
        major = self.node("Transpose", [x], (steps, width), name + ".time_major",
                          perm=[1, 0, 2])
        outputs, last = self._unique(name + ".Y"), self._unique(name + ".Y_h")
        self.nodes.append(helper.make_node("LSTM", [major, *weights], [outputs, last],
                                           name=name, hidden_size=hidden))
        self.shapes[outputs], self.shapes[last] = (steps, 1, hidden), (1, hidden)
        return self.node("Squeeze", [last, self.constant(np.array([0], np.int64),
                                                          name + ".axes")],
                         (hidden,), name + ".last")

    # -- result --------------------------------------------------------------------
    def build(self, output: str, output_name: str = "output", doc: str = ""
              ) -> onnx.ModelProto:
        """The model whose input is ``input`` and whose only output is ``output``."""
        if output != output_name:
            # The graph output is the last layer's tensor under its public name.
            if output_name in self._used:
                raise Deep500Error(f"model {self.name!r}: output name {output_name!r} "
                                   f"is already used inside the graph")
            producer = next(n for n in self.nodes if output in n.output)
            producer.output[list(producer.output).index(output)] = output_name
            for node in self.nodes:
                node.input[:] = [output_name if i == output else i for i in node.input]
            self.shapes[output_name] = self.shapes.pop(output)
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(self.input, self.input_elem_type,
                                           [self.batch, *self.shapes[self.input]])],
            [helper.make_tensor_value_info(output_name, self.onnx_dtype,
                                           [self.batch, *self.shapes[output_name]])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  ir_version=IR_VERSION, producer_name=PRODUCER,
                                  doc_string=doc)
        # The weights are copied once, into the model's graph (make_graph would copy
        # them into a graph and make_model that graph again: seconds for VGG-16).
        model.graph.initializer.extend(self.initializers)
        return model


def parameter_count(model: onnx.ModelProto, trainable_only: bool = True) -> int:
    """Number of elements in the floating-point initializers of ``model``; with
    ``trainable_only`` the running mean and variance of BatchNormalization nodes (inputs 3
    and 4) are left out, as frameworks count parameters."""
    statistics = set()
    if trainable_only:
        for node in model.graph.node:
            if node.op_type == "BatchNormalization":
                statistics.update(node.input[3:5])
    total = 0
    for tensor in model.graph.initializer:
        if tensor.name in statistics:
            continue
        if tensor.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                                TensorProto.BFLOAT16):
            total += math.prod(tensor.dims)
    return total
