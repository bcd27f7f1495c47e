"""Analytic floating-point operation counts and achieved GFLOP/s.

A multiply-add counts as two operations, as in DeepBench and the Deep500 paper.
Counts follow the ONNX operator definitions (https://onnx.ai/onnx/operators/):

* Gemm:   Y = alpha·A'·B' + beta·C  →  2·M·N·K, plus M·N for adding C.
* MatMul: NumPy matmul with broadcast batch axes  →  2·batch·M·N·K.
* Conv:   N·M·H_out·W_out outputs (extents: ``deep500.utils.onnx_interop.window``),
          each a dot product of length (C/group)·kH·kW
          →  2·N·M·H_out·W_out·(C/group)·kH·kW, plus N·M·H_out·W_out for the bias.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from deep500.utils.metric import MetricResult, TestMetric
from deep500.utils.onnx_interop.window import window_geometry

FlopCounter = Callable[[Sequence[tuple], dict], int]
_COUNTERS: dict[str, FlopCounter] = {}


def _counter(op_type: str):
    def register(fn: FlopCounter) -> FlopCounter:
        _COUNTERS[op_type] = fn
        return fn
    return register


@_counter("Gemm")
def _gemm(shapes, attributes) -> int:
    a, b = shapes[0], shapes[1]
    m, k = (a[1], a[0]) if attributes.get("transA", 0) else (a[0], a[1])
    n = b[0] if attributes.get("transB", 0) else b[1]
    flops = 2 * m * n * k
    if len(shapes) > 2 and shapes[2] is not None and attributes.get("beta", 1.0) != 0:
        flops += m * n
    return int(flops)


@_counter("MatMul")
def _matmul(shapes, attributes) -> int:
    a, b = list(shapes[0]), list(shapes[1])
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    return int(2 * int(np.prod(batch, dtype=np.int64)) * a[-2] * b[-1] * a[-1])


def conv_output_spatial(spatial, kernel, strides, pads, dilations) -> list[int]:
    """Output extents of a convolution or pooling window (ONNX, explicit padding)."""
    return list(window_geometry("Conv", spatial, kernel, strides=strides,
                                dilations=dilations, pads=pads).output)


@_counter("Conv")
def _conv(shapes, attributes) -> int:
    x, w = shapes[0], shapes[1]
    kernel = list(w[2:])
    out = window_geometry("Conv", x[2:], kernel, strides=attributes.get("strides"),
                          dilations=attributes.get("dilations"),
                          pads=attributes.get("pads"),
                          auto_pad=attributes.get("auto_pad") or "NOTSET").output
    outputs = int(x[0] * w[0] * int(np.prod(out, dtype=np.int64)))
    group = int(attributes.get("group", 1))
    flops = 2 * outputs * (x[1] // group) * int(np.prod(kernel, dtype=np.int64))
    if len(shapes) > 2 and shapes[2] is not None:
        flops += outputs
    return int(flops)


def flop_count(op_type: str, input_shapes: Sequence[tuple], attributes: dict | None = None):
    """Analytic FLOPs of one call, or None for operators without a counter."""
    counter = _COUNTERS.get(op_type)
    if counter is None:
        return None
    return counter([tuple(s) if s is not None else None for s in input_shapes],
                   attributes or {})


class FLOPs(TestMetric):
    """Floating-point operations per call and achieved GFLOP/s.

    Args:
        flops: the count; if None, a validation function fills it in from the
            operator's type, attributes and input shapes (see ``flop_count``).
        timer: a WallclockTime measuring the same calls; its median gives GFLOP/s.
    """

    fields = ("flops", "gflops_per_s")  # the summary's keys

    def __init__(self, flops: int | None = None, timer=None):
        self.flops = flops
        self.timer = timer

    def set_operator(self, op_type: str, input_shapes, attributes) -> None:
        if self.flops is None:
            self.flops = flop_count(op_type, input_shapes, attributes)

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        summary = {"flops": self.flops, "gflops_per_s": None}
        if self.flops is not None and self.timer is not None:
            median = float(np.median(self.timer.samples_seconds))
            summary["gflops_per_s"] = self.flops / median / 1e9 if median > 0 else None
        return MetricResult(self.name, summary, primary="gflops_per_s", unit="GFLOP/s")
