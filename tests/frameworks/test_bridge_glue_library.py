"""The bridges' glue libraries (deep500/frameworks/_bridge/glue_library.py), on a tiny
CPython extension that needs no framework: built once and found in the cache with the
interpreter in its key, loaded on first use, the switch selecting the fallback without
building, and one warning when the library cannot be had. The frameworks' own glue is
tested in test_glue_loading.py."""
from __future__ import annotations

import sys
import warnings

import pytest

from deep500.frameworks._bridge.glue_library import GlueLibrary, python_extension
from deep500.lv0_operators import glue_build
from deep500.utils.errors import Deep500Error

SOURCE = """
#include <Python.h>
static PyObject* answer(PyObject*, PyObject*) { return PyLong_FromLong(ANSWER); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, nullptr},
                                {nullptr, nullptr, 0, nullptr}};
static PyModuleDef module = {PyModuleDef_HEAD_INIT, "%s", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_%s() { return PyModule_Create(&module); }
"""


class TinyGlueWarning(UserWarning):
    """The test's glue is unavailable."""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP500_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("D500_TINY_GLUE", raising=False)
    return tmp_path


def tiny_extension(folder, name: str = "d500_tiny_glue", configure=None) -> GlueLibrary:
    """An extension whose ``answer()`` is 42 (a define from ``configure``'s flags)."""
    source = folder / f"{name}.cpp"
    source.write_text(SOURCE % (name, name))
    return python_extension(
        name, "a tiny test glue", str(source), "D500_TINY_GLUE", "the test's fallback runs",
        TinyGlueWarning, ["-shared", "-fPIC", "-O0"],
        configure or (lambda: (["-DANSWER=42"], {"framework": "none 1.0"})),
        expected_seconds=2)


def test_an_extension_is_built_once_and_keyed_by_framework_and_interpreter(cache):
    glue = tiny_extension(cache)
    assert glue.enabled()
    module = glue.get()
    assert module.answer() == 42
    assert glue.get() is module                       # loaded once per process
    built = glue.loader.loaded_build
    assert not built.cache_hit
    assert built.manifest["framework"] == "none 1.0"
    assert built.manifest["python"] == sys.implementation.cache_tag
    assert f"-I{glue_build.python_include()}" in built.manifest["flags"]
    assert built.library_file.startswith("d500_tiny_glue.")   # the extension suffix
    again = glue.build()
    assert again.cache_hit and again.library_path == built.library_path


def test_the_switch_selects_the_fallback_without_building(cache, monkeypatch):
    glue = tiny_extension(cache)
    monkeypatch.setenv("D500_TINY_GLUE", "0")
    monkeypatch.setattr(glue, "build", lambda: pytest.fail("built while disabled"))
    assert not glue.enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TinyGlueWarning)
        assert glue.get() is None


def test_a_library_that_cannot_be_had_warns_once(cache):
    def missing_headers():
        raise Deep500Error("the framework's headers are missing (test)")
    glue = tiny_extension(cache, configure=missing_headers)
    with pytest.warns(TinyGlueWarning, match="a tiny test glue is unavailable, so the "
                                              "test's fallback runs .*headers are missing"):
        assert glue.get() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", TinyGlueWarning)   # once per process
        assert glue.get() is None
    assert "headers are missing" in glue.loader.failure


def test_a_library_loaded_its_own_way(cache):
    """What ``load`` returns is what ``get`` hands out (the TensorFlow kernel: an op
    library and its ctypes handle)."""
    source = cache / "plain.cpp"
    source.write_text('extern "C" int d500_plain() { return 7; }\n')
    glue = GlueLibrary("d500_plain", "a plain test library", str(source), "libplain.so",
                       "D500_TINY_GLUE", "nothing runs", TinyGlueWarning,
                       ["-shared", "-fPIC", "-O0"], lambda: ([], {"framework": "none"}),
                       expected_seconds=2, load=lambda built: built.library_path)
    path = glue.get()
    assert path.endswith("libplain.so") and glue.loader.loaded_build.library_path == path
