"""``compile_custom_cppop``: build a C++ operator once, cache it, and describe it.

Cache: each build lives in its own folder, ``<cache>/<name>-<key>`` where ``<key>`` is a
SHA-256 over the ABI version, Deep500's header, the sources and the headers beside them,
the compile definitions, the CMake options, the tensor descriptors and the compiler's
identity. The cache root is ``$DEEP500_CACHE/cppops`` or ``~/.cache/deep500/cppops``.

Concurrency: a build happens in a private temporary folder under a file lock, and is
published with one atomic ``rename``; a folder that exists is complete. So when every
rank under ``mpirun`` compiles the same operator, one builds and the others wait, then
load the same library; a reader never sees a half-written one. An interrupted build
kills its compiler's process group and removes its temporary folder; what a killed
process left (``<folder>.tmp-<pid>-*`` of a process that no longer runs) is removed by
the next build (:func:`remove_stale_temporaries`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from typing import Sequence

from deep500.lv0_operators import cpp_build, toolchain
from deep500.lv0_operators.cpp_library import ABI_VERSION, CppLibrary, load_library
from deep500.utils.errors import Deep500Error, ShapeError
from deep500.utils.tensor_desc import TensorDescriptor

MANIFEST = "manifest.json"
LOCK_TIMEOUT_SECONDS = 1800
_C_TYPES = {"float32": "float", "float64": "double", "int32": "int32_t", "int64": "int64_t",
            "uint8": "uint8_t", "int8": "int8_t", "bool": "bool"}
_HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".inl", ".cuh")


def cache_root() -> str:
    base = os.environ.get("DEEP500_CACHE") or os.path.join(os.path.expanduser("~"),
                                                            ".cache", "deep500")
    return os.path.join(base, "cppops")


@dataclasses.dataclass
class CppOpDescriptor:
    """A built C++ operator: where its library is and which tensors it takes.

    Pass it to ``d5ref.custom_op``, ``d5pt.custom_op`` or ``d5tf.custom_op``; all three
    share the one library loaded in this process.
    """
    name: str
    folder: str
    library_file: str
    input_descriptors: list
    output_descriptors: list
    cache_key: str | None = None
    cache_hit: bool = False
    seconds: float = 0.0  # build time on a miss, lookup and load time on a hit
    manifest: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def library_path(self) -> str:
        return os.path.join(self.folder, self.library_file)

    def library(self) -> CppLibrary:
        """The loaded library, its signatures checked against the descriptors."""
        library = load_library(self.library_path, self.name)
        library.check_signatures(self.input_descriptors, self.output_descriptors)
        return library

    @property
    def has_backward(self) -> bool:
        return self.library().backward_signature is not None


def _descriptors(values, what: str) -> list[TensorDescriptor]:
    if values is None:
        raise ShapeError(f"compile_custom_cppop: {what} descriptors are required "
                         f"(a list of d5.tensordesc(dtype, shape))")
    if isinstance(values, TensorDescriptor):
        values = [values]
    result = []
    for index, value in enumerate(values):
        if not isinstance(value, TensorDescriptor):
            raise ShapeError(f"compile_custom_cppop: {what} {index} is {value!r}; use "
                             f"d5.tensordesc(dtype, shape)")
        if str(value.dtype) not in _C_TYPES:
            raise ShapeError(f"compile_custom_cppop: {what} {index} has dtype {value.dtype}; "
                             f"C++ operators take {', '.join(_C_TYPES)}")
        value.to_tensor_t()  # rank check
        result.append(value)
    return result


def _sources(sources) -> list[str]:
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths = [os.path.abspath(os.fspath(s)) for s in sources]
    if not paths:
        raise Deep500Error("compile_custom_cppop: no source files given")
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise Deep500Error(f"compile_custom_cppop: source file(s) not found: "
                           f"{', '.join(missing)}")
    return paths


def _definitions(inputs, outputs, additional: dict) -> dict[str, str]:
    first = (inputs or outputs)[0]
    definitions = {"DTYPE": _C_TYPES[str(first.dtype)], "D500_NUM_INPUTS": str(len(inputs)),
                   "D500_NUM_OUTPUTS": str(len(outputs))}
    for key, value in (additional or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
            raise Deep500Error(f"compile_custom_cppop: definition name {key!r} is not a C "
                               f"identifier")
        definitions[str(key)] = "1" if value is True else str(value)
    return definitions


def _hash_files(digest, sources: list[str]) -> None:
    """Sources and the headers in their folders (an edited local header rebuilds)."""
    files = set(sources)
    for folder in {os.path.dirname(s) for s in sources}:
        files.update(os.path.join(folder, f) for f in os.listdir(folder)
                     if f.endswith(_HEADER_SUFFIXES))
    for path in sorted(files):
        digest.update(path.encode() + b"\0")
        with open(path, "rb") as handle:
            digest.update(hashlib.sha256(handle.read()).digest())


def cache_key(sources, definitions, cmake_options, inputs, outputs, compiler: dict) -> str:
    digest = hashlib.sha256()
    digest.update(f"abi={ABI_VERSION}\0".encode())
    with open(os.path.join(cpp_build.INCLUDE_DIR, "deep500", "deep500.h"), "rb") as handle:
        digest.update(hashlib.sha256(handle.read()).digest())
    _hash_files(digest, sources)
    digest.update(json.dumps({"definitions": definitions, "cmake": list(cmake_options),
                              "inputs": [d.to_dict() for d in inputs],
                              "outputs": [d.to_dict() for d in outputs],
                              "compiler": compiler}, sort_keys=True).encode())
    return digest.hexdigest()


def _read_manifest(folder: str) -> dict | None:
    try:
        with open(os.path.join(folder, MANIFEST), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _descriptor_from_manifest(folder: str, manifest: dict, hit: bool,
                              seconds: float) -> CppOpDescriptor:
    def parse(entries):
        return [TensorDescriptor(e["dtype"], e["shape"], e.get("layout")) for e in entries]
    return CppOpDescriptor(manifest["name"], folder, manifest["library"],
                           parse(manifest["inputs"]), parse(manifest["outputs"]),
                           manifest.get("cache_key"), hit, seconds, manifest)


def _publish(temporary: str, final: str) -> None:
    """Move a finished build into place atomically, replacing an outdated one."""
    if os.path.isdir(final):
        stale = f"{final}.stale-{uuid.uuid4().hex[:8]}"
        os.rename(final, stale)
        os.rename(temporary, final)
        shutil.rmtree(stale, ignore_errors=True)
    else:
        os.rename(temporary, final)


def compile_custom_cppop(name: str, sources, input_descriptors: Sequence[TensorDescriptor],
                         output_descriptors: Sequence[TensorDescriptor],
                         additional_definitions: dict | None = None,
                         additional_cmake_options: Sequence[str] = (),
                         output_folder: str | None = None,
                         live_output: bool = False) -> CppOpDescriptor:
    """Build (or find in the cache) the C++ operator ``name`` from ``sources``.

    Args:
        name: the operator's name, a C identifier (also the library's name).
        sources: one path or a list of C++ source paths.
        input_descriptors, output_descriptors: one ``d5.tensordesc`` per tensor, in the
            order of the C++ ``forward`` arguments.
        additional_definitions: extra ``-D`` compile definitions (``{"TILE": 8}``).
            ``DTYPE`` (the C++ type of the first input), ``D500_NUM_INPUTS`` and
            ``D500_NUM_OUTPUTS`` are always defined.
        additional_cmake_options: extra arguments for CMake's configure step, e.g.
            ``["-DCMAKE_BUILD_TYPE=Debug"]``.
        output_folder: build here instead of the cache (ahead-of-time builds).
        live_output: also print CMake's and the compiler's output as it comes.

    Returns a CppOpDescriptor; ``cache_hit`` says whether anything was compiled.
    Raises ``d5.CompilationError`` (first error lines and the log's path) when the
    build fails, and a ``ToolchainError`` naming what to install when CMake or the
    compiler is missing.
    """
    started = time.perf_counter()
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise Deep500Error(f"compile_custom_cppop: the name {name!r} must be a C identifier "
                           f"(letters, digits, underscores)")
    inputs = _descriptors(input_descriptors, "input")
    outputs = _descriptors(output_descriptors, "output")
    if not outputs:
        raise ShapeError(f"compile_custom_cppop({name!r}): an operator needs an output")
    paths = _sources(sources)
    definitions = _definitions(inputs, outputs, additional_definitions or {})
    options = [str(o) for o in additional_cmake_options]
    compiler = toolchain.find_cxx_compiler()
    identity = toolchain.compiler_identity(compiler)
    key = cache_key(paths, definitions, options, inputs, outputs, identity)
    if output_folder is not None:
        final = os.path.abspath(output_folder)
        if (os.path.isdir(final) and os.listdir(final)
                and _read_manifest(final) is None):
            raise Deep500Error(f"compile_custom_cppop({name!r}): output_folder {final} "
                               f"exists and is not a Deep500 build folder (no {MANIFEST}); "
                               f"name a new or empty folder, it is replaced on rebuilds")
        if os.path.isdir(final) and not os.listdir(final):
            os.rmdir(final)
    else:
        final = os.path.join(cache_root(), f"{name}-{key[:20]}")

    def current():
        manifest = _read_manifest(final)
        if manifest and manifest.get("cache_key") == key and os.path.isfile(
                os.path.join(final, manifest.get("library", ""))):
            return manifest
        return None

    manifest = current()
    if manifest:  # published folders are complete: no lock needed to read one
        return _descriptor_from_manifest(final, manifest, True,
                                         time.perf_counter() - started)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    from filelock import FileLock, Timeout
    lock = FileLock(final + ".lock")
    try:
        with lock.acquire(timeout=LOCK_TIMEOUT_SECONDS):
            manifest = current()  # another process may have built it while we waited
            if manifest:
                return _descriptor_from_manifest(final, manifest, True,
                                                 time.perf_counter() - started)
            manifest = _build(name, paths, definitions, options, inputs, outputs, compiler,
                              identity, key, final, live_output)
    except Timeout:
        raise Deep500Error(f"compile_custom_cppop({name!r}): waited {LOCK_TIMEOUT_SECONDS} s "
                           f"for the lock {final}.lock held by another build; if no build "
                           f"is running, delete that file") from None
    return _descriptor_from_manifest(final, manifest, False, time.perf_counter() - started)


_TEMPORARY = re.compile(r"(?P<final>.+)\.(?:tmp-(?P<pid>\d+)|stale)-[0-9a-f]{8}")


def remove_stale_temporaries(final: str) -> list[str]:
    """Remove what builds that were killed left beside their folders, and return it:
    ``<folder>.tmp-<pid>-<hex>`` whose process ``pid`` no longer runs on this host, and
    ``<folder>.stale-<hex>`` (a replaced build not yet deleted). The caller holds
    ``final``'s lock, so for ``final`` itself they are certainly stale; for other
    folders beside it, only where their lock is free as well."""
    import psutil
    from filelock import FileLock, Timeout
    parent = os.path.dirname(final) or "."
    removed = []
    try:
        entries = os.listdir(parent)
    except OSError:
        return removed
    for entry in entries:
        match = _TEMPORARY.fullmatch(entry)
        if match is None:
            continue
        pid = match.group("pid")
        if pid is not None and psutil.pid_exists(int(pid)):
            continue
        path = os.path.join(parent, entry)
        owner = os.path.join(parent, match.group("final"))
        if owner != final:
            lock = FileLock(owner + ".lock")
            try:
                lock.acquire(blocking=False)
            except Timeout:
                continue  # that folder is being built now
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                lock.release()
        else:
            shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _build(name, paths, definitions, options, inputs, outputs, compiler, identity, key,
           final, live_output) -> dict:
    remove_stale_temporaries(final)
    temporary = f"{final}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.makedirs(temporary)
    started = time.perf_counter()
    try:
        try:
            library_file = cpp_build.build_library(
                temporary, name, paths, definitions, compiler,
                ["-DCMAKE_BUILD_TYPE=Release", *options], live_output)
        except Exception:
            failed = final + ".failed"
            shutil.rmtree(failed, ignore_errors=True)
            shutil.rmtree(os.path.join(temporary, "build"), ignore_errors=True)
            os.rename(temporary, failed)
            raise _relocated_error(temporary, failed)
        shutil.rmtree(os.path.join(temporary, "build"), ignore_errors=True)
        manifest = {"abi": ABI_VERSION, "name": name, "library": library_file,
                    "inputs": [d.to_dict() for d in inputs],
                    "outputs": [d.to_dict() for d in outputs], "cache_key": key,
                    "sources": paths, "definitions": definitions, "cmake_options": options,
                    "compiler": identity, "build_seconds": time.perf_counter() - started,
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        manifest_path = os.path.join(temporary, MANIFEST)
        with open(manifest_path, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2)
        _publish(temporary, final)
        return manifest
    finally:
        # Published or kept as .failed, it is gone; interrupted (SIGINT, SIGTERM), not.
        shutil.rmtree(temporary, ignore_errors=True)


def _relocated_error(temporary: str, failed: str):
    """The pending exception, with paths pointing at the kept ``.failed`` folder."""
    import sys
    error = sys.exc_info()[1]
    if hasattr(error, "log_path") and error.log_path:
        error.log_path = error.log_path.replace(temporary, failed)
        error.args = (str(error).replace(temporary, failed),)
    return error


def load_custom_cppop(path: str, input_descriptors: Sequence[TensorDescriptor] | None = None,
                      output_descriptors: Sequence[TensorDescriptor] | None = None
                      ) -> CppOpDescriptor:
    """Load a prebuilt operator (``deep500 compile`` output); no compiler is needed.

    ``path`` is the build folder (or its ``manifest.json``), or a bare shared library
    together with its descriptors.
    """
    started = time.perf_counter()
    path = os.path.abspath(path)
    if os.path.basename(path) == MANIFEST:
        path = os.path.dirname(path)
    if os.path.isdir(path):
        manifest = _read_manifest(path)
        if manifest is None:
            raise Deep500Error(f"load_custom_cppop: {path} has no readable {MANIFEST}; build "
                               f"it with 'deep500 compile' or pass the library file and its "
                               f"descriptors")
        descriptor = _descriptor_from_manifest(path, manifest, True, 0.0)
        if input_descriptors is not None:
            descriptor.input_descriptors = _descriptors(input_descriptors, "input")
        if output_descriptors is not None:
            descriptor.output_descriptors = _descriptors(output_descriptors, "output")
    elif os.path.isfile(path):
        name = re.sub(r"^lib", "", os.path.basename(path).split(".")[0])
        descriptor = CppOpDescriptor(name, os.path.dirname(path), os.path.basename(path),
                                     _descriptors(input_descriptors, "input"),
                                     _descriptors(output_descriptors, "output"), None, True)
    else:
        raise Deep500Error(f"load_custom_cppop: {path} does not exist")
    descriptor.library()
    descriptor.seconds = time.perf_counter() - started
    return descriptor
