"""Deep500's three framework glue libraries (the PyTorch glue, the TensorFlow kernel, the
TensorFlow eager glue; glue_build.GlueLoader): built once per installation and found in
the cache; ``<SWITCH>=0`` selects the Python fallback without building; when a library
cannot be had (no compiler, no headers, a compile error), one warning per process and
a working fallback. What each library computes is tested in its framework's files."""
from __future__ import annotations

import importlib
import os
import pathlib
import warnings

import numpy as np
import pytest

import deep500 as d5
from deep500.lv0_operators import glue_build, toolchain

SOURCES = pathlib.Path(__file__).parent / "cpp_ops"
F32 = d5.tensordesc("float32", [4, 5])
NUMPY_FUNCTION_TYPES = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
# The manifest's fields that are not the caller's key fields.
# linker_flags: gold or the default linker, same library either way (not in the key).
_MANIFEST_FIELDS = {"name", "library", "cache_key", "source", "cxxflags", "compiler",
                    "linker_flags", "build_seconds", "built_at"}


def check_pytorch_fallback(descriptor):
    """d5pt.custom_op is the Python path (ctypes), forward and backward."""
    import torch
    import deep500.frameworks.pytorch as d5pt
    op = d5pt.custom_op(descriptor)
    assert type(op) is d5pt.PyTorchCppOp
    x = torch.ones(4, 5, requires_grad=True)
    z = op(x, torch.ones(4, 5))
    np.testing.assert_array_equal(z.detach().numpy(), np.full((4, 5), 3.0, np.float32))
    z.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 5), 2.0, np.float32))


def check_tensorflow_graph_fallback(descriptor):
    """Inside tf.function the operator is a numpy_function node."""
    import deep500.frameworks.tensorflow as d5tf
    tf = d5tf.native_ops.tf
    op = d5tf.custom_op(descriptor)
    traced = tf.function(lambda x, y: op(x, y))
    x = tf.ones((4, 5))
    types = {node.type for node in traced.get_concrete_function(x, x).graph.get_operations()}
    assert "D500CustomOp" not in types and NUMPY_FUNCTION_TYPES & types
    np.testing.assert_array_equal(traced(x, x).numpy(), np.full((4, 5), 3.0, np.float32))


def check_tensorflow_eager_fallback(descriptor):
    """Eager calls take the Python path (ctypes and DLPack)."""
    import deep500.frameworks.tensorflow as d5tf
    tf = d5tf.native_ops.tf
    op = d5tf.custom_op(descriptor)
    assert op._eager_glue is None
    z = op(tf.ones((4, 5)), tf.ones((4, 5)))
    np.testing.assert_array_equal(z.numpy(), np.full((4, 5), 3.0, np.float32))


# name -> (framework package, glue module, framework version in the manifest, fallback)
GLUES = {
    "pytorch glue": ("torch", "deep500.frameworks.pytorch.glue", "torch",
                     check_pytorch_fallback),
    "tensorflow kernel": ("tensorflow", "deep500.frameworks.tensorflow.tf_kernel",
                          "tensorflow", check_tensorflow_graph_fallback),
    "tensorflow eager glue": ("tensorflow", "deep500.frameworks.tensorflow.glue",
                              "tensorflow", check_tensorflow_eager_fallback),
}


@pytest.fixture(params=list(GLUES))
def glue(request):
    """(glue module, framework version field, fallback check)."""
    framework, module_name, version_field, check_fallback = GLUES[request.param]
    pytest.importorskip(framework)
    return importlib.import_module(module_name), version_field, check_fallback


@pytest.fixture(scope="module")
def scale_add():
    """z = 2x + y on float32 [4, 5]."""
    return d5.compile_custom_cppop("scale_add", str(SOURCES / "scale_add.cpp"),
                                   [F32, F32], [F32])


@pytest.fixture
def fresh_state(glue, monkeypatch):
    """As if this process had not tried to load the library yet (restored afterwards)."""
    module = glue[0]
    monkeypatch.delenv(module.GLUE.switch, raising=False)
    for attribute in ("loaded", "loaded_build", "failure"):
        monkeypatch.setattr(module.LOADER, attribute, None)
    return module


def test_build_is_found_in_the_cache_with_its_key_recorded(glue, monkeypatch):
    module, version_field, _ = glue
    monkeypatch.delenv(module.GLUE.switch, raising=False)
    assert module.LOADER.get() is not None, module.LOADER.failure
    loaded = module.LOADER.loaded_build
    # The cache that the loaded build lives in ($DEEP500_CACHE/cppops/<name>-<key>).
    monkeypatch.setenv("DEEP500_CACHE", os.path.dirname(os.path.dirname(loaded.folder)))
    again = module.build()
    assert again.cache_hit and again.library_path == loaded.library_path
    assert again.seconds < 5
    framework = importlib.import_module(version_field)
    assert again.manifest[version_field] == framework.__version__
    assert again.manifest["build_seconds"] > 0
    # The manifest records everything the key is made of.
    fields = {k: v for k, v in again.manifest.items() if k not in _MANIFEST_FIELDS}
    identity = toolchain.compiler_identity()
    key = glue_build.cache_key(fields, again.manifest["cxxflags"], identity,
                               module.GLUE.source)
    assert key == again.cache_key
    assert glue_build.cache_key({**fields, "extra": "-DOTHER"}, again.manifest["cxxflags"],
                                identity, module.GLUE.source) != key
    assert glue_build.cache_key(fields, again.manifest["cxxflags"],
                                {**identity, "version": "x"}, module.GLUE.source) != key


def test_switch_selects_the_fallback_without_building(glue, scale_add, fresh_state,
                                                      monkeypatch):
    module, _, check_fallback = glue
    monkeypatch.setenv(module.GLUE.switch, "0")
    monkeypatch.setattr(module.GLUE, "build", lambda: pytest.fail("built while disabled"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", module.LOADER.category)
        check_fallback(scale_add)


def _no_compiler():
    raise toolchain.ToolchainError("No C++ compiler was found (test)")


@pytest.mark.parametrize("failure,match", [
    ("no compiler", "ToolchainError: No C\\+\\+ compiler was found"),
    ("no headers", "headers are missing"),
    ("compile error", "(?s)failed to compile.*deliberately broken"),
])
def test_unavailable_library_warns_once_and_falls_back(glue, scale_add, fresh_state,
                                                       monkeypatch, tmp_path, failure,
                                                       match):
    module, _, check_fallback = glue
    if failure == "no compiler":
        monkeypatch.setattr(toolchain, "find_cxx_compiler", _no_compiler)
    elif failure == "no headers":
        # Python's headers for the extensions, TensorFlow's for the kernel.
        import sysconfig
        paths = sysconfig.get_paths()
        monkeypatch.setattr(sysconfig, "get_paths",
                            lambda: {**paths, "include": str(tmp_path)})
        if module.__name__.endswith("tf_kernel"):
            tf = pytest.importorskip("tensorflow")
            monkeypatch.setattr(tf.sysconfig, "get_compile_flags",
                                lambda: [f"-I{tmp_path}", "--std=c++17"])
    else:  # the real compiler on a source that does not compile
        broken = tmp_path / os.path.basename(module.GLUE.source)
        broken.write_text("#error deliberately broken\n")
        monkeypatch.setattr(module.GLUE, "source", str(broken))
    with pytest.warns(module.LOADER.category, match=match):
        check_fallback(scale_add)
    with warnings.catch_warnings():
        warnings.simplefilter("error", module.LOADER.category)  # once per process
        check_fallback(scale_add)
