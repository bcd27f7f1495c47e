"""Operator sizes from Baidu's DeepBench (Apache-2.0), packaged in ``deep500/data``.

The Deep500 paper benchmarks Level 0 on DeepBench's 160 GEMM and 94 convolution
training sizes. Rows are read as dictionaries of ints (plus the ``set`` name) and turned
into ONNX operator specifications (input shapes and attributes).
"""
from __future__ import annotations

import csv
import os

from deep500.utils.errors import Deep500Error

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
PACKAGED = {"deepbench_gemm.csv": "Gemm", "deepbench_conv.csv": "Conv"}


def packaged_data_path(name: str) -> str:
    return os.path.join(DATA_DIR, name)


def read_rows(path: str) -> list[dict]:
    """All rows of a DeepBench-style CSV, numeric columns as ints."""
    if not os.path.isfile(path):
        raise Deep500Error(f"Operator size file {path!r} does not exist")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = []
        for line_number, row in enumerate(csv.DictReader(handle), start=2):
            try:
                rows.append({key: (value if key == "set" else int(value))
                             for key, value in row.items()})
            except (TypeError, ValueError) as exc:
                raise Deep500Error(f"{path}, line {line_number}: not a DeepBench row "
                                   f"({exc})") from None
    return rows


def gemm_spec(row: dict) -> tuple[list[tuple], dict]:
    """(input shapes, Gemm attributes) for a DeepBench GEMM row (m, n, k, a_t, b_t)."""
    m, n, k = row["m"], row["n"], row["k"]
    a = (k, m) if row.get("a_t") else (m, k)
    b = (n, k) if row.get("b_t") else (k, n)
    return [a, b], {"transA": int(row.get("a_t", 0)), "transB": int(row.get("b_t", 0))}


def conv_spec(row: dict) -> tuple[list[tuple], dict]:
    """(input shapes, Conv attributes) for a DeepBench convolution row (NCHW, OIHW)."""
    x = (row["n"], row["c"], row["h"], row["w"])
    w = (row["k"], row["c"], row["filter_h"], row["filter_w"])
    attributes = {"kernel_shape": [row["filter_h"], row["filter_w"]],
                  "pads": [row["pad_h"], row["pad_w"], row["pad_h"], row["pad_w"]],
                  "strides": [row["stride_h"], row["stride_w"]]}
    return [x, w], attributes


SPEC_BUILDERS = {"Gemm": gemm_spec, "Conv": conv_spec}


def describe(op_type: str, row: dict) -> str:
    """The sizes of a row as DeepBench states them, for labels."""
    if op_type == "Gemm":
        trans = "".join(t for t, key in (("ᵀA", "a_t"), ("ᵀB", "b_t")) if row.get(key))
        return f"m={row['m']} n={row['n']} k={row['k']}" + (f" {trans}" if trans else "")
    if op_type == "Conv":
        stride = f"/{row['stride_h']}" if row["stride_h"] > 1 or row["stride_w"] > 1 else ""
        return (f"N={row['n']} {row['c']}×{row['h']}×{row['w']} → K={row['k']} "
                f"{row['filter_h']}×{row['filter_w']}{stride}")
    return ""
