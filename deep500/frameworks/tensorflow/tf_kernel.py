"""Deep500's generic TensorFlow kernel (``kernel/d500_tf_op.cc``): built once per
TensorFlow installation, loaded with ``tf.load_op_library``.

The kernel defines the ops ``D500CustomOp`` and ``D500CustomOpGrad``, which call a
Deep500 C++ operator's C ABI (``d500_forward``/``d500_backward``) directly on tensor
memory, so that ``d5tf.custom_op`` inside ``tf.function`` runs without Python (see
``custom_ops.py``). It is compiled with the system C++ compiler (``toolchain``) and
TensorFlow's own flags (``tf.sysconfig.get_compile_flags()``/``get_link_flags()``: the
headers shipped in the wheel, ``-D_GLIBCXX_USE_CXX11_ABI``, the C++ standard) in about
10 s, the time TensorFlow's headers take to parse.

Cache: ``<cache>/d500_tf_kernel-<key>`` next to the C++ operators
(``$DEEP500_CACHE/cppops``), where ``<key>`` is a SHA-256 over TensorFlow's version,
its compile and link flags, the kernel's source and the compiler's identity; builds are
file-locked and published by an atomic rename (``glue_build``, through
``frameworks/_bridge/glue_library.py``): under ``mpirun`` one rank builds, the others
wait and load it.

When the kernel cannot be had (no compiler, TensorFlow's headers missing, a failed
build or load), :func:`kernel_ops` warns once (:class:`NativeKernelWarning`) and returns
None, and C++ operators inside ``tf.function`` fall back to ``tf.numpy_function``.
``DEEP500_TF_NATIVE_KERNEL=0`` selects that fallback without trying.

Build ahead of time (a Docker image, before an MPI job):
``deep500 build-glue --framework tensorflow``.
"""
from __future__ import annotations

import ctypes
import os
import threading
import weakref

from deep500.frameworks._bridge.glue_library import GlueLibrary
from deep500.frameworks.tensorflow._tf import tf
from deep500.lv0_operators import glue_build


class NativeKernelWarning(UserWarning):
    """Deep500's TensorFlow kernel is unavailable: C++ operators inside tf.function use
    ``tf.numpy_function`` (50–100 µs per call in a graph instead of about 1)."""


def _tensorflow_flags() -> tuple[list[str], dict]:
    """TensorFlow's compile and link flags, and its version fields."""
    compile_flags = list(tf.sysconfig.get_compile_flags())
    link_flags = list(tf.sysconfig.get_link_flags())
    glue_build.require_header(compile_flags,
                              os.path.join("tensorflow", "core", "framework", "op_kernel.h"),
                              "TensorFlow's C++ headers")
    return [*compile_flags, *link_flags], {
        "tensorflow": tf.version.VERSION, "tensorflow_git": tf.version.GIT_VERSION,
        "compile_flags": compile_flags, "link_flags": link_flags}


def _load(kernel: glue_build.GlueBuild):
    """The op module, and the same library through ctypes (dlopen returns the one
    TensorFlow loaded): the instance registry."""
    return tf.load_op_library(kernel.library_path), ctypes.CDLL(kernel.library_path)


GLUE = GlueLibrary(
    name="d500_tf_kernel", what="Deep500's TensorFlow kernel",
    source=os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel",
                        "d500_tf_op.cc"),
    library_file="libd500_tf_kernel.so", switch="DEEP500_TF_NATIVE_KERNEL",
    fallback="C++ operators inside tf.function run through tf.numpy_function",
    category=NativeKernelWarning,
    # Release build; TensorFlow's headers use APIs they deprecate themselves: keep the
    # log to what matters.
    cxxflags=["-shared", "-fPIC", "-O2", "-Wno-deprecated-declarations"],
    configure=_tensorflow_flags, expected_seconds=10, load=_load)
# What the registry and ``deep500 build-glue`` ask of a glue module.
LOADER, build = GLUE.loader, GLUE.build
_lock = threading.Lock()
_instances = 0  # instance numbers given out by register_instance


def register_instance(owner, handle: int) -> int:
    """Tell the loaded kernel that the operator instance at ``handle`` is alive until
    ``owner`` is collected; returns the instance number its nodes carry (never reused,
    unlike addresses). Nodes of an unregistered instance fail instead of calling a
    dangling address."""
    global _instances
    with _lock:
        _instances += 1
        instance = _instances
    arguments = (ctypes.c_int64(handle), ctypes.c_int64(instance))
    library = LOADER.loaded[1]
    library.d500_tf_register(*arguments)
    weakref.finalize(owner, library.d500_tf_unregister, *arguments)
    return instance


@tf.autograph.experimental.do_not_convert  # called while tf.function traces
def kernel_ops(honour_switch: bool = True):
    """The loaded kernel's op module (``d500_custom_op``, ``d500_custom_op_grad``), built
    on first use; None when unavailable (warned once per process) or, unless
    ``honour_switch`` is False, disabled by ``DEEP500_TF_NATIVE_KERNEL=0``."""
    loaded = GLUE.get(honour_switch)
    return None if loaded is None else loaded[0]

