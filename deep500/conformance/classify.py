"""Why a case does not pass on an executor: one failure class per non-passing case,
derived from the case's model, the exception the executor raised and the comparison.

The classes are tried in the order of :data:`FAILURE_CLASSES`; the first that applies
wins. ``nondeterministic`` and ``harness`` come first because no executor could pass
those cases as the harness runs them, whatever it raised; ``tolerance``, ``wrong`` and
``error`` are what is left of computed results and crashes.
"""
from __future__ import annotations

import re

import onnx

from deep500.conformance.compare import Mismatch
from deep500.conformance.nondeterministic import random_reason

FAILURE_CLASSES = {
    "nondeterministic": "the model draws random numbers (Bernoulli, Random*, Multinomial, "
                        "Dropout in training mode): ONNX fixes the distribution, not the "
                        "values, so no executor can be held to the expected ones",
    "harness": "the case cannot be run as the harness feeds it: sequence- or "
               "optional-typed graph inputs or outputs, a training operator "
               "(ai.onnx.preview.training) run as inference, or test data that does not "
               "fit the graph",
    "dtype": "the executor declines an element type (float16, bfloat16, float8, float4, "
             "int4, int2, string, complex) or mishandles one (values of such a case differ "
             "by more than a near miss), or an output has another dtype",
    "unsupported op": "the executor declines the operator, or the form of it the case uses "
                      "(UnsupportedError or NotImplementedError)",
    "tolerance": "values differ, by at most NEAR_MISS times what the tolerance allows at "
                 "the output's largest magnitude (the matrix shows the largest error in "
                 "ULPs of that magnitude)",
    "wrong": "values differ by more, NaN or infinities are elsewhere, or a shape or an "
             "output is wrong",
    "error": "any other exception while building or running the executor",
}
NEAR_MISS = 4.0
TRAINING_DOMAIN = "ai.onnx.preview.training"
RARE_ELEMENT_TYPES = frozenset(
    getattr(onnx.TensorProto, name) for name in (
        "FLOAT16", "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
        "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "FLOAT4E2M1", "INT4", "UINT4", "INT2", "UINT2",
        "STRING", "COMPLEX64", "COMPLEX128") if hasattr(onnx.TensorProto, name))
_OPERATOR_DECLINED = re.compile(r"does not support (operator|\d+ operators)|"
                                r"is not a registered function/op")
_NO_KERNEL = re.compile(r"Could not find an implementation for|Failed to find kernel for")
# "string" is left out: C++ messages say std::string of anything
_NAMES_A_DTYPE = re.compile(
    r"b?float ?(16|8|4)|bfloat|\bu?int ?[24]\b|e[2458]m[0-3]|complex ?(64|128)|"
    r"tensor type|element type|\bdtype\b|\bDT_[A-Z0-9]+", re.IGNORECASE)


def classify(case, status: str, message: str = "", mismatch: Mismatch | None = None,
             values: dict | None = None, operator_passes: bool | None = None) -> str:
    """The failure class of a case that did not pass (``''`` when ``status`` is pass).

    ``case`` is a :class:`~deep500.conformance.cases.ConformanceCase`; ``status`` and
    ``message`` are :func:`~deep500.conformance.run.run_case`'s; ``mismatch`` is the
    comparison's when the status is fail; ``values`` are the fed inputs by name (the
    case's first data set when not given), which say whether a Dropout trains;
    ``operator_passes`` whether the executor passes another case of the same operator
    (None: not known), which tells a kernel missing for an element type from a missing
    operator when a runtime's kernel lookup fails without saying which.
    """
    if status == "pass":
        return ""
    if values is None:
        values = dict(zip(case.input_names, case.data_sets[0][0])) if case.data_sets else {}
    if random_reason(case.model, values):
        return "nondeterministic"
    if harness_reason(case.model) or (mismatch is not None and mismatch.kind == "data"):
        return "harness"
    if mismatch is not None:
        return _classify_mismatch(case, mismatch)
    return _classify_exception(case, status, message, operator_passes)


def harness_reason(model: onnx.ModelProto) -> str:
    """Why the harness cannot run the model as ONNX's test runner means it ('' if it
    can): it feeds and fetches tensors (and, for executors that take them, Python lists
    and None), and runs inference only."""
    for value in list(model.graph.input) + list(model.graph.output):
        kind = value.type.WhichOneof("value")
        if kind in ("sequence_type", "optional_type", "map_type"):
            return f"graph value {value.name!r} is {kind.replace('_type', '')}-typed"
    for node in model.graph.node:
        if node.domain == TRAINING_DOMAIN:
            return f"{node.op_type} is a training operator ({TRAINING_DOMAIN})"
    return ""


def rare_element_types(model: onnx.ModelProto) -> list[str]:
    """The element types of the graph's inputs and outputs that executors often lack."""
    types = {value.type.tensor_type.elem_type
             for value in list(model.graph.input) + list(model.graph.output)
             if value.type.WhichOneof("value") == "tensor_type"}
    return sorted(onnx.TensorProto.DataType.Name(t) for t in types & RARE_ELEMENT_TYPES)


def _classify_mismatch(case, mismatch: Mismatch) -> str:
    if mismatch.kind == "dtype":
        return "dtype"
    if mismatch.kind == "values" and (mismatch.near_miss or float("inf")) <= NEAR_MISS:
        return "tolerance"
    if mismatch.kind in ("values", "nonfinite") and rare_element_types(case.model):
        return "dtype"
    return "wrong"


def _classify_exception(case, status: str, message: str, operator_passes: bool | None
                        ) -> str:
    text = message.replace(case.name, "<case>")
    if _OPERATOR_DECLINED.search(text):
        return "unsupported op"
    if _NAMES_A_DTYPE.search(text):
        return "dtype"
    if status != "unsupported":
        return "error"
    # onnxruntime says "Could not find an implementation for OneHot(28)" when no kernel
    # has the case's element types, and the same when it has no kernel of that version
    kernel_for_types = (_NO_KERNEL.search(text) and rare_element_types(case.model)
                        and operator_passes is not False)
    return "dtype" if kernel_for_types else "unsupported op"
