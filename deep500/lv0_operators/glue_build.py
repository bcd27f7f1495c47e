"""Building and loading Deep500's framework glue: one C++ library per framework
installation (the TensorFlow kernel ``tf_kernel.py`` and eager glue ``tensorflow/glue.py``,
the PyTorch glue ``pytorch/glue.py``) that calls C++ operators' C ABI on the
framework's tensors without Python in between.

Unlike operator libraries (``cpp_compiler``, through CMake), a glue library is one
source file compiled with the framework's own flags (its headers, its C++ ABI, its
libraries) by one compiler command. The cache and its guarantees are the operators':

* ``<cache>/<name>-<key>`` under ``cpp_compiler.cache_root()`` (``$DEEP500_CACHE/cppops``),
  where ``<key>`` is a SHA-256 over Deep500's ABI version, the caller's key fields (the
  framework's version and flags), the command's flags, the source and the compiler's
  identity;
* builds are file-locked and published by an atomic rename: under ``mpirun`` one rank
  builds, the others wait and load it;
* a failed build raises ``d5.CompilationError`` with the compiler's first error lines
  and the path of the full log, kept in ``<name>-<key>.failed``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import threading
import time
import uuid
import warnings
from typing import Callable

from deep500.lv0_operators import cpp_build, cpp_compiler, toolchain
from deep500.lv0_operators.cpp_library import ABI_VERSION
from deep500.utils.errors import CompilationError, Deep500Error


@dataclasses.dataclass
class GlueBuild:
    """A built glue library: where it is, and whether this call compiled it."""
    folder: str
    library_file: str
    cache_key: str
    cache_hit: bool
    seconds: float  # compile time on a miss, lookup time on a hit
    manifest: dict

    @property
    def library_path(self) -> str:
        return os.path.join(self.folder, self.library_file)


def cache_key(key_fields: dict, cxxflags: list[str], identity: dict, source: str) -> str:
    """SHA-256 over what decides the library's contents."""
    with open(source, "rb") as handle:
        source_hash = hashlib.sha256(handle.read()).hexdigest()
    return hashlib.sha256(json.dumps({
        "abi": ABI_VERSION, **key_fields, "cxxflags": cxxflags, "compiler": identity,
        "source": source_hash}, sort_keys=True).encode()).hexdigest()


def build(name: str, what: str, source: str, library_file: str, cxxflags: list[str],
          framework_flags: list[str], key_fields: dict, expected_seconds: float,
          live_output: bool = False) -> GlueBuild:
    """Build ``source`` into ``library_file`` with
    ``compiler cxxflags [-fuse-ld=gold] source -o library framework_flags``, or find it in
    the cache (``toolchain.fast_linker_flags`` says whether gold is used).

    ``what`` names the library in messages ("Deep500's TensorFlow kernel");
    ``key_fields`` (JSON values) go into the cache key and the manifest. Raises
    ``d5.CompilationError`` when the build fails and a ``ToolchainError`` when there is
    no compiler. A build prints one line to stderr first, since it takes
    ``expected_seconds`` or so.
    """
    started = time.perf_counter()
    compiler = toolchain.find_cxx_compiler()
    identity = toolchain.compiler_identity(compiler)
    key = cache_key(key_fields, cxxflags, identity, source)
    final = os.path.join(cpp_compiler.cache_root(), f"{name}-{key[:20]}")

    def current():
        manifest = cpp_compiler._read_manifest(final)
        if manifest and manifest.get("cache_key") == key and os.path.isfile(
                os.path.join(final, manifest.get("library", ""))):
            return manifest
        return None

    def result(manifest, hit):
        return GlueBuild(final, manifest["library"], key, hit,
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
            print(f"deep500: building {what} (once per installation, about "
                  f"{expected_seconds:.0f} s) into {final}", file=sys.stderr, flush=True)
            # The linker is not in the key: gold and GNU ld give the same dependencies
            # and symbols, and probing on every cache hit would cost each process ~0.1 s.
            linker = list(toolchain.fast_linker_flags(compiler))
            command = [compiler, *cxxflags, *linker, source, "-o", None, *framework_flags]
            manifest = _compile(what, command, library_file, final, {
                "name": name, "library": library_file, "cache_key": key, "source": source,
                **key_fields, "cxxflags": cxxflags, "linker_flags": linker,
                "compiler": identity}, live_output)
    except Timeout:
        raise Deep500Error(f"{what}: waited {cpp_compiler.LOCK_TIMEOUT_SECONDS} s for the "
                           f"lock {final}.lock held by another build; if no build is "
                           f"running, delete that file") from None
    return result(manifest, False)


def _compile(what: str, command: list, library_file: str, final: str, manifest: dict,
             live_output: bool) -> dict:
    cpp_compiler.remove_stale_temporaries(final)
    temporary = f"{final}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.makedirs(temporary)
    command[command.index(None)] = os.path.join(temporary, library_file)
    log_path = os.path.join(temporary, "build.log")
    started = time.perf_counter()
    try:
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                status = cpp_build._run_logged(command, log, live_output, temporary)
            if status != 0:
                with open(log_path, encoding="utf-8", errors="replace") as reader:
                    errors = cpp_build.first_errors(reader.read())
                raise CompilationError(f"{what} failed to compile (exit status {status}).\n"
                                       + "\n".join(errors) + f"\nFull log: {log_path}",
                                       log_path=log_path, first_errors=errors)
        except Exception:
            failed = final + ".failed"
            shutil.rmtree(failed, ignore_errors=True)
            os.rename(temporary, failed)
            raise cpp_compiler._relocated_error(temporary, failed)
        manifest = {**manifest, "build_seconds": time.perf_counter() - started,
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        with open(os.path.join(temporary, cpp_compiler.MANIFEST), "w",
                  encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2)
        cpp_compiler._publish(temporary, final)
        return manifest
    finally:
        # Published or kept as .failed, it is gone; interrupted (SIGINT, SIGTERM), not.
        shutil.rmtree(temporary, ignore_errors=True)


def python_include() -> str:
    """The folder of Python's C headers, which CPython extensions compile against."""
    include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise Deep500Error(f"Python's C headers are missing ({include}/Python.h): install "
                           f"the Python development package (e.g. python3-dev)")
    return include


def require_header(compile_flags: list[str], header: str, what: str) -> None:
    """Raise a Deep500Error unless ``header`` is in one of the ``-I`` folders of
    ``compile_flags``; ``what`` names the headers ("TensorFlow's C++ headers")."""
    includes = [flag[2:] for flag in compile_flags if flag.startswith("-I")]
    if not any(os.path.isfile(os.path.join(i, header)) for i in includes):
        raise Deep500Error(f"{what} are missing ({header} is not in "
                           f"{', '.join(includes) or 'any include folder'}): this "
                           f"installation cannot build Deep500's glue")


class GlueLoader:
    """One glue library in this process: built (or found in the cache) and loaded on
    first use, at most once; when it cannot be had, a warning once and None ever after,
    so that callers take their Python fallback.

    ``build()`` returns a :class:`GlueBuild`; ``load(built)`` returns what callers use
    (an extension module, an op module). ``switch`` names the environment variable
    whose value ``0`` disables the library without trying; ``fallback`` says what runs
    instead, ``category`` is the warning's class.
    """

    def __init__(self, what: str, switch: str, fallback: str, category: type,
                 build: Callable[[], GlueBuild], load: Callable[[GlueBuild], object]):
        self.what, self.switch, self.fallback, self.category = what, switch, fallback, category
        self._build, self._load = build, load
        self._lock = threading.Lock()
        self.loaded = None  # what load returned, once loaded
        self.loaded_build: GlueBuild | None = None
        self.failure: str | None = None  # why it could not be had, once known

    def enabled(self) -> bool:
        """False when the switch is set to 0 (or false, no, off)."""
        return os.environ.get(self.switch, "1").strip().lower() not in (
            "0", "false", "no", "off")

    def get(self, honour_switch: bool = True, stacklevel: int = 2):
        """The loaded library; None when unavailable (warned once, at the caller's
        ``stacklevel``) or, unless ``honour_switch`` is False, disabled."""
        if honour_switch and not self.enabled():
            return None
        if self.loaded is not None:
            return self.loaded
        with self._lock:
            if self.loaded is None and self.failure is None:
                try:
                    built = self._build()
                    self.loaded, self.loaded_build = self._load(built), built
                except Exception as exc:  # noqa: BLE001 - any failure means: fall back
                    self.failure = f"{type(exc).__name__}: {exc}"
                    warnings.warn(f"{self.what} is unavailable, so {self.fallback} "
                                  f"(slower). {self.failure}. Set {self.switch}=0 to use "
                                  f"that without trying to build.", self.category,
                                  stacklevel=stacklevel + 1)
            return self.loaded


def load_extension(name: str, built: GlueBuild):
    """The CPython extension module ``name`` from a built library."""
    loader = importlib.machinery.ExtensionFileLoader(name, built.library_path)
    spec = importlib.util.spec_from_file_location(name, built.library_path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module

