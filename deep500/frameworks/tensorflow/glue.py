"""Deep500's TensorFlow eager glue (``kernel/d500_tf_eager_glue.cc``): a CPython
extension, built once per TensorFlow installation, through which an eager call of a
``d5tf.custom_op`` runs a C++ operator.

Why: a kernel that streams more memory than the last-level cache (a 4 M-element
elementwise operator reads and writes 32 MiB) leaves every cache cold, so the Python
that runs next pays a miss on nearly every object it touches (~10 µs per Python-level
call on the 2-core development VM, see ``pytorch/glue.py``). The Python eager
path (``tf.executing_eagerly()``, the tape check, ``_numpy()`` views, ctypes pointer
arrays, a NumPy output, its DLPack import) added ~115 µs, 13%, to a 4 M-element relu.
The glue does the same in one C function: the eager and tape checks, each input's
type, dtype, shape and host placement (TensorFlow's C API on the tensor handle), the
output allocation (malloc, reused from the heap, huge-page advised as NumPy does) as a
``TF_Tensor`` and an ``EagerTensor`` on it, and the call with the GIL released.
Anything it does not handle (``tf.function`` tracing, a recording ``GradientTape``, a
NumPy array, a variable, a GPU tensor, a mismatched tensor) takes the Python path,
which converts or explains. See ``benchmarks/lv0_cppop_overhead.py``.

Compiled against TensorFlow's C API headers (``tensorflow/include``), the functions that
TensorFlow's Python extension exports for eager tensors (``lib_pywrap_tensorflow_common``)
and Python's headers, in about 10 s, by ``frameworks/_bridge/glue_library.py``; cached
as ``glue_build`` describes (``$DEEP500_CACHE/cppops``, locked, atomic). When it cannot
be had (no compiler, no headers, a failed build or load), ``GLUE.get()`` warns once
(:class:`EagerGlueWarning`) and returns None, and eager calls take the Python path.
``DEEP500_TF_EAGER_GLUE=0`` selects that path without trying.

Build ahead of time (a Docker image, before an MPI job):
``deep500 build-glue --framework tensorflow``.
"""
from __future__ import annotations

import os

from deep500.frameworks._bridge.glue_library import python_extension
from deep500.frameworks.tensorflow._tf import tf
from deep500.lv0_operators import glue_build
from deep500.utils.errors import Deep500Error

# The library of TensorFlow's Python extension that defines EagerTensor.
_PYTHON_LIBRARY = "lib_pywrap_tensorflow_common.so"


class EagerGlueWarning(UserWarning):
    """Deep500's TensorFlow eager glue is unavailable: eager calls of C++ operators run
    through the Python path (a few µs more per call when caches are warm, ~100 µs after
    a large kernel)."""


def _tensorflow_flags() -> tuple[list[str], dict]:
    """The flags of TensorFlow's C API headers and of the libraries defining eager
    tensors, and TensorFlow's version fields."""
    root = os.path.dirname(os.path.abspath(tf.__file__))
    compile_flags = list(tf.sysconfig.get_compile_flags())
    glue_build.require_header(compile_flags,
                              os.path.join("tensorflow", "python", "eager", "pywrap_tfe.h"),
                              "TensorFlow's headers")
    python_library = os.path.join(root, "python")
    if not os.path.isfile(os.path.join(python_library, _PYTHON_LIBRARY)):
        raise Deep500Error(f"{_PYTHON_LIBRARY} is not in {python_library}: this "
                           f"TensorFlow keeps its eager tensors elsewhere, which the eager "
                           f"glue does not support")
    flags = [*compile_flags, *tf.sysconfig.get_link_flags(),
             f"-L{python_library}", f"-l:{_PYTHON_LIBRARY}", "-l:libtensorflow_cc.so.2",
             f"-Wl,-rpath,{python_library}", f"-Wl,-rpath,{root}"]
    return flags, {"tensorflow": tf.version.VERSION, "tensorflow_git": tf.version.GIT_VERSION}


GLUE = python_extension(
    name="d500_tf_eager_glue", what="Deep500's TensorFlow eager glue",
    source=os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel",
                        "d500_tf_eager_glue.cc"),
    switch="DEEP500_TF_EAGER_GLUE",
    fallback="eager calls of C++ operators run through the Python path",
    category=EagerGlueWarning,
    # Release build; TensorFlow's headers use APIs they deprecate themselves.
    cxxflags=["-shared", "-fPIC", "-O2", "-Wno-deprecated-declarations"],
    configure=_tensorflow_flags, expected_seconds=10)
# What the registry and ``deep500 build-glue`` ask of a glue module.
LOADER, build = GLUE.loader, GLUE.build
