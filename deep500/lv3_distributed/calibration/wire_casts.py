"""The casts of a 16-bit wire (``software.wire_casts`` of a machine file): what narrowing
float32 values to the wire type and widening them back costs per element, measured on
the code that does it (``wire_dtype.WireType.encode``/``decode``, NumPy), not assumed
from the memory bandwidth. Narrowing to bfloat16 rounds to nearest even in five integer
passes and checks for NaN; float16 goes through NumPy's cast; both cost several times
a copy's bytes (docs/performance_models.md, "The step").

Each cast is timed on a memory-resident buffer of ``CAST_ELEMENTS`` float32 values (as
a fusion buffer of gradients is), the median over ``repeats`` calls after a warm-up; the
section keeps seconds per element with the samples' CI.
"""
from __future__ import annotations

import time

import numpy as np

from deep500.lv3_distributed.calibration.samples import summarize
from deep500.lv3_distributed.wire_dtype import COMM_DTYPES, WireType

CAST_ELEMENTS = 1 << 20     # 4 MB of float32: beyond the caches, like a gradient buffer


def _per_element(function, elements: int, repeats: int) -> list:
    function()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) / elements)
    return samples


def measure_wire_casts(repeats: int, log=None, elements: int = CAST_ELEMENTS) -> dict:
    """``{dtype: {encode_s_per_element, decode_s_per_element}}`` for every narrow wire
    type, each a summary (value and CI) of ``repeats`` timed calls."""
    values = np.random.default_rng(0).standard_normal(elements).astype(np.float32)
    widened = np.empty_like(values)
    section = {"method": f"WireType.encode / decode of {elements} float32 values "
                         f"(memory-resident), median over calls, seconds per element"}
    for name in COMM_DTYPES[1:]:
        wire = WireType(name)
        narrowed = wire.empty(elements)
        encode = _per_element(lambda: wire.encode(values, narrowed), elements, repeats)
        decode = _per_element(lambda: wire.decode(narrowed, widened), elements, repeats)
        if log is not None:
            log.write({"phase": "wire_casts", "dtype": name, "elements": elements,
                       "encode_s_per_element": encode, "decode_s_per_element": decode})
        section[name] = {"encode_s_per_element": summarize(encode),
                         "decode_s_per_element": summarize(decode)}
    return section
