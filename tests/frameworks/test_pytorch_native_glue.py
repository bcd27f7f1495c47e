"""Deep500's PyTorch glue (deep500/frameworks/pytorch/native_glue.py): built once per
PyTorch installation and cached; when it cannot be had, a warning and the Python path.
What the glue computes is tested in test_pytorch_custom_ops.py (every test runs through
both paths)."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import deep500 as d5  # noqa: E402
import deep500.frameworks.pytorch as d5pt  # noqa: E402
from deep500.frameworks.pytorch import custom_ops, native_glue  # noqa: E402
from deep500.lv0_operators import toolchain  # noqa: E402

SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpp_ops")
F32 = d5.tensordesc("float32", [4, 5])


@pytest.fixture(scope="module")
def scale_add():
    return d5.compile_custom_cppop("scale_add", os.path.join(SOURCES, "scale_add.cpp"),
                                   [F32, F32], [F32])


@pytest.fixture
def loaded(monkeypatch):
    monkeypatch.delenv(native_glue.SWITCH, raising=False)
    assert native_glue.glue_module() is not None, native_glue.LOADER.failure
    return native_glue.LOADER.loaded_build


@pytest.fixture
def fresh_glue_state(monkeypatch):
    """As if this process had not tried to load the glue yet."""
    monkeypatch.delenv(native_glue.SWITCH, raising=False)
    for attribute in ("loaded", "loaded_build", "failure"):
        monkeypatch.setattr(native_glue.LOADER, attribute, None)


def check_python_path(scale_add):
    op = d5pt.custom_op(scale_add)
    assert type(op) is d5pt.PyTorchCppOp
    x = torch.ones(4, 5, requires_grad=True)
    z = op(x, torch.ones(4, 5))
    np.testing.assert_array_equal(z.detach().numpy(), np.full((4, 5), 3.0, np.float32))
    z.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 5), 2.0, np.float32))


def test_build_is_cached_per_torch_python_and_compiler(loaded, monkeypatch):
    # The cache that the loaded build lives in ($DEEP500_CACHE/cppops/<name>-<key>).
    monkeypatch.setenv("DEEP500_CACHE", os.path.dirname(os.path.dirname(loaded.folder)))
    again = native_glue.build()
    assert again.cache_hit and again.library_path == loaded.library_path
    assert again.seconds < 5
    assert again.manifest["torch"] == torch.__version__
    assert again.manifest["build_seconds"] > 0
    fields = again.manifest
    identity = toolchain.compiler_identity()
    key = native_glue.glue_build.cache_key(native_glue._key_fields(fields["flags"]),
                                           native_glue._CXXFLAGS, identity, native_glue.SOURCE)
    assert key == again.cache_key
    assert native_glue.glue_build.cache_key(
        native_glue._key_fields(fields["flags"] + ["-DOTHER"]), native_glue._CXXFLAGS,
        identity, native_glue.SOURCE) != key


def test_switch_selects_the_python_path_without_building(scale_add, fresh_glue_state,
                                                         monkeypatch):
    monkeypatch.setenv(native_glue.SWITCH, "0")
    monkeypatch.setattr(native_glue, "build", lambda: pytest.fail("built while disabled"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", native_glue.NativeGlueWarning)
        check_python_path(scale_add)


def _no_compiler():
    raise toolchain.ToolchainError("No C++ compiler was found (test)")


@pytest.mark.parametrize("failure,match", [
    ("no compiler", "ToolchainError: No C\\+\\+ compiler was found"),
    ("compile error", "(?s)failed to compile.*deliberately broken"),
])
def test_unavailable_glue_warns_once_and_falls_back(scale_add, fresh_glue_state, monkeypatch,
                                                    tmp_path, failure, match):
    if failure == "no compiler":
        monkeypatch.setattr(toolchain, "find_cxx_compiler", _no_compiler)
    else:  # the real compiler on a source that does not compile
        broken = tmp_path / "d500_torch_glue.cpp"
        broken.write_text("#error deliberately broken\n")
        monkeypatch.setattr(native_glue, "SOURCE", str(broken))
    with pytest.warns(native_glue.NativeGlueWarning, match=match):
        check_python_path(scale_add)
    with warnings.catch_warnings():
        warnings.simplefilter("error", native_glue.NativeGlueWarning)  # once per process
        check_python_path(scale_add)


def test_glue_module_is_used_by_default(scale_add, loaded):
    op = d5pt.custom_op(scale_add)
    assert type(op) is custom_ops.PyTorchGlueCppOp
    assert custom_ops._glue_call is native_glue.glue_module().call
