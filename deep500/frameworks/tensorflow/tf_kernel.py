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
(``cpp_compiler.cache_root()``, so ``$DEEP500_CACHE/cppops``), where ``<key>`` is a
SHA-256 over TensorFlow's version, its compile and link flags, the kernel's source and
the compiler's identity. Builds are file-locked and published by an atomic rename, as in
``cpp_compiler``: under ``mpirun`` one rank builds, the others wait and load it.

When the kernel cannot be had (no compiler, TensorFlow's headers missing, a failed
build or load), :func:`kernel_ops` warns once (:class:`NativeKernelWarning`) and returns
None, and C++ operators inside ``tf.function`` fall back to ``tf.numpy_function``.
``DEEP500_TF_NATIVE_KERNEL=0`` selects that fallback without trying.

Build ahead of time (a Docker image, before an MPI job):
``python -m deep500.frameworks.tensorflow.tf_kernel``.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import shutil
import threading
import time
import uuid
import warnings
import weakref

from deep500.frameworks.tensorflow._tf import tf
from deep500.lv0_operators import cpp_build, cpp_compiler, toolchain
from deep500.lv0_operators.cpp_library import ABI_VERSION
from deep500.utils.errors import CompilationError, Deep500Error

NAME = "d500_tf_kernel"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel", "d500_tf_op.cc")
SWITCH = "DEEP500_TF_NATIVE_KERNEL"
# Release build; TensorFlow's headers use APIs they deprecate themselves: keep the log
# to what matters.
_CXXFLAGS = ["-shared", "-fPIC", "-O2", "-Wno-deprecated-declarations"]


class NativeKernelWarning(UserWarning):
    """Deep500's TensorFlow kernel is unavailable: C++ operators inside tf.function use
    ``tf.numpy_function`` (50–100 µs per call in a graph instead of about 1)."""


@dataclasses.dataclass
class KernelBuild:
    """A built kernel library: where it is, and whether this call compiled it."""
    folder: str
    library_file: str
    cache_key: str
    cache_hit: bool
    seconds: float  # compile time on a miss, lookup time on a hit
    manifest: dict

    @property
    def library_path(self) -> str:
        return os.path.join(self.folder, self.library_file)


def _flags() -> tuple[list[str], list[str]]:
    compile_flags = list(tf.sysconfig.get_compile_flags())
    link_flags = list(tf.sysconfig.get_link_flags())
    includes = [f[2:] for f in compile_flags if f.startswith("-I")]
    header = os.path.join("tensorflow", "core", "framework", "op_kernel.h")
    if not any(os.path.isfile(os.path.join(i, header)) for i in includes):
        raise Deep500Error(f"TensorFlow's C++ headers are missing ({header} is not in "
                           f"{', '.join(includes) or 'any include folder'}): this "
                           f"TensorFlow installation cannot build kernels")
    return compile_flags, link_flags


def cache_key(compile_flags, link_flags, identity: dict) -> str:
    with open(SOURCE, "rb") as handle:
        source = hashlib.sha256(handle.read()).hexdigest()
    return hashlib.sha256(json.dumps({
        "abi": ABI_VERSION, "tensorflow": tf.version.VERSION,
        "tensorflow_git": tf.version.GIT_VERSION, "compile_flags": compile_flags,
        "link_flags": link_flags, "cxxflags": _CXXFLAGS, "compiler": identity,
        "source": source}, sort_keys=True).encode()).hexdigest()


def build(live_output: bool = False) -> KernelBuild:
    """Build the kernel library for this TensorFlow, or find it in the cache.

    Raises ``d5.CompilationError`` (first error lines and the log's path) when the build
    fails, a ``ToolchainError`` when there is no compiler, and a ``Deep500Error`` when
    TensorFlow ships no headers.
    """
    started = time.perf_counter()
    compile_flags, link_flags = _flags()
    compiler = toolchain.find_cxx_compiler()
    identity = toolchain.compiler_identity(compiler)
    key = cache_key(compile_flags, link_flags, identity)
    final = os.path.join(cpp_compiler.cache_root(), f"{NAME}-{key[:20]}")

    def current():
        manifest = cpp_compiler._read_manifest(final)
        if manifest and manifest.get("cache_key") == key and os.path.isfile(
                os.path.join(final, manifest.get("library", ""))):
            return manifest
        return None

    def result(manifest, hit):
        return KernelBuild(final, manifest["library"], key, hit,
                           time.perf_counter() - started, manifest)

    manifest = current()
    if manifest:  # published folders are complete: no lock needed to read one
        return result(manifest, True)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    from filelock import FileLock, Timeout
    try:
        with FileLock(final + ".lock").acquire(timeout=cpp_compiler.LOCK_TIMEOUT_SECONDS):
            manifest = current()  # another process may have built it while we waited
            if manifest:
                return result(manifest, True)
            manifest = _compile(compiler, identity, compile_flags, link_flags, key, final,
                                live_output)
    except Timeout:
        raise Deep500Error(f"Deep500's TensorFlow kernel: waited "
                           f"{cpp_compiler.LOCK_TIMEOUT_SECONDS} s for the lock "
                           f"{final}.lock held by another build; if no build is running, "
                           f"delete that file") from None
    return result(manifest, False)


def _compile(compiler, identity, compile_flags, link_flags, key, final,
             live_output) -> dict:
    temporary = f"{final}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.makedirs(temporary)
    library = f"lib{NAME}.so"
    log_path = os.path.join(temporary, "build.log")
    command = [compiler, *_CXXFLAGS, SOURCE, "-o", os.path.join(temporary, library),
               *compile_flags, *link_flags]
    started = time.perf_counter()
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            status = cpp_build._run_logged(command, log, live_output, temporary)
        if status != 0:
            with open(log_path, encoding="utf-8", errors="replace") as reader:
                errors = cpp_build.first_errors(reader.read())
            raise CompilationError(f"Deep500's TensorFlow kernel failed to compile (exit "
                                   f"status {status}).\n" + "\n".join(errors)
                                   + f"\nFull log: {log_path}", log_path=log_path,
                                   first_errors=errors)
    except Exception:
        failed = final + ".failed"
        shutil.rmtree(failed, ignore_errors=True)
        os.rename(temporary, failed)
        raise cpp_compiler._relocated_error(temporary, failed)
    manifest = {"name": NAME, "library": library, "cache_key": key, "source": SOURCE,
                "tensorflow": tf.version.VERSION, "compile_flags": compile_flags,
                "link_flags": link_flags, "compiler": identity,
                "build_seconds": time.perf_counter() - started,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    with open(os.path.join(temporary, cpp_compiler.MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)
    cpp_compiler._publish(temporary, final)
    return manifest


# -- the process's kernel ---------------------------------------------------------------
_lock = threading.Lock()
_ops = None  # the loaded op module, once loaded
_library = None  # the same library through ctypes: the instance registry
loaded_build: KernelBuild | None = None  # the build this process loaded
_failure: str | None = None  # why it could not be had, once that is known
_instances = 0  # instance numbers given out by register_instance


def enabled() -> bool:
    """False when ``DEEP500_TF_NATIVE_KERNEL=0`` selects the numpy_function fallback."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


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
    _library.d500_tf_register(*arguments)
    weakref.finalize(owner, _library.d500_tf_unregister, *arguments)
    return instance


@tf.autograph.experimental.do_not_convert  # called while tf.function traces
def kernel_ops(honour_switch: bool = True):
    """The loaded kernel's op module (``d500_custom_op``, ``d500_custom_op_grad``), built
    on first use; None when unavailable (warned once per process) or, unless
    ``honour_switch`` is False, disabled by ``DEEP500_TF_NATIVE_KERNEL=0``."""
    global _ops, _library, _failure, loaded_build
    if honour_switch and not enabled():
        return None
    if _ops is not None:
        return _ops
    with _lock:
        if _ops is None and _failure is None:
            try:
                kernel = build()
                _ops = tf.load_op_library(kernel.library_path)
                _library = ctypes.CDLL(kernel.library_path)  # dlopen: the same one
                loaded_build = kernel
            except Exception as exc:  # noqa: BLE001 - any failure means: fall back
                _failure = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"Deep500's TensorFlow kernel is unavailable, so C++ "
                              f"operators inside tf.function run through "
                              f"tf.numpy_function (slower). {_failure}. Set {SWITCH}=0 "
                              f"to use the fallback without trying to build.",
                              NativeKernelWarning, stacklevel=2)
        return _ops


if __name__ == "__main__":  # python -m deep500.frameworks.tensorflow.tf_kernel
    kernel = build(live_output=True)
    how = "found in the cache" if kernel.cache_hit else "built"
    print(f"{how} in {kernel.seconds:.2f} s: {kernel.library_path}")
