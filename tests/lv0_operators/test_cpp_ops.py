"""C++ operators: build through CMake, cache, concurrent builds, ahead-of-time builds,
forward and gradient checks on NumPy, and every error a user can cause."""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.lv0_operators import cpp_compiler, toolchain

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = os.path.join(HERE, "cpp")


def source(name: str) -> str:
    return os.path.join(SOURCES, name)


def desc(dtype, shape):
    return d5.tensordesc(dtype, shape)


@pytest.fixture(scope="module")
def scale_add_f32():
    d = desc("float32", [3, 4])
    return d5.compile_custom_cppop("scale_add", source("scale_add.cpp"), [d, d], [d])


def calls(descriptor) -> int:
    function = ctypes.CDLL(descriptor.library_path).scale_add_calls
    function.restype = ctypes.c_int64
    return function()


# -- building and the cache -------------------------------------------------------------
def test_second_compile_is_a_cache_hit(scale_add_f32):
    d = desc("float32", [3, 4])
    library_mtime = os.path.getmtime(scale_add_f32.library_path)
    again = d5.compile_custom_cppop("scale_add", source("scale_add.cpp"), [d, d], [d])
    assert again.cache_hit
    assert again.library_path == scale_add_f32.library_path
    assert os.path.getmtime(again.library_path) == library_mtime
    manifest = json.load(open(os.path.join(again.folder, "manifest.json")))
    assert manifest["definitions"]["DTYPE"] == "float"
    assert manifest["cache_key"] == again.cache_key


def test_cache_key_covers_descriptors_definitions_and_sources(tmp_path, scale_add_f32):
    d = desc("float32", [3, 4])
    other_shape = desc("float32", [2, 2])
    built = d5.compile_custom_cppop("scale_add", source("scale_add.cpp"),
                                    [other_shape, other_shape], [other_shape])
    assert built.folder != scale_add_f32.folder
    defined = d5.compile_custom_cppop("scale_add", source("scale_add.cpp"), [d, d], [d],
                                      {"UNUSED_FLAG": 1})
    assert defined.folder != scale_add_f32.folder and not defined.cache_hit
    copy = tmp_path / "scale_add.cpp"
    shutil.copy(source("scale_add.cpp"), copy)
    first = d5.compile_custom_cppop("scale_add", str(copy), [d, d], [d])
    copy.write_text(copy.read_text() + "\n// edited\n")
    edited = d5.compile_custom_cppop("scale_add", str(copy), [d, d], [d])
    assert not edited.cache_hit and edited.cache_key != first.cache_key
    # A header next to the source is part of the key too.
    (tmp_path / "local.h").write_text("// a local header\n")
    with_header = d5.compile_custom_cppop("scale_add", str(copy), [d, d], [d])
    assert with_header.cache_key != edited.cache_key


def test_forward_and_gradient_float32(scale_add_f32):
    op = d5ref.custom_op(scale_add_f32)
    assert isinstance(op, d5.CustomCPPOp)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(op(x, y), 2 * x + y)
    result = d5.test_op_gradient(op, [x, y])
    assert result.passed
    dx, dy = op.backward([np.ones((3, 4), np.float32)], [x, y], [op(x, y)])
    np.testing.assert_array_equal(dx, np.full((3, 4), 2, np.float32))
    np.testing.assert_array_equal(dy, np.ones((3, 4), np.float32))


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64"])
def test_other_element_types(dtype):
    d = desc(dtype, [5])
    op = d5ref.custom_op(d5.compile_custom_cppop("scale_add", source("scale_add.cpp"),
                                                 [d, d], [d]))
    x = np.arange(5).astype(dtype)
    y = np.arange(10, 15).astype(dtype)
    out = op(x, y)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, 2 * x + y)
    if dtype == "float64":
        assert d5.test_op_gradient(op, [x + 0.5, y], rtol=1e-7, atol=1e-9).passed
    else:
        assert op.backward([np.ones(5, dtype)], [x, y], [out]) == [None, None]


def test_mixed_dtypes_several_inputs_and_outputs():
    inputs = [desc("float64", [4, 6]), desc("int32", [1])]
    outputs = [desc("float64", [4]), desc("int64", [4])]
    op = d5ref.custom_op(d5.compile_custom_cppop("row_max", source("row_max.cpp"), inputs,
                                                 outputs))
    rng = np.random.default_rng(1)
    x = rng.permutation(24).reshape(4, 6).astype(np.float64)  # distinct: argmax is unique
    offset = np.array([10], np.int32)
    values, indices = op(x, offset)
    np.testing.assert_array_equal(values, x.max(axis=1))
    np.testing.assert_array_equal(indices, x.argmax(axis=1) + 10)
    assert indices.dtype == np.int64
    result = d5.test_op_gradient(op, [x, offset], rtol=1e-7, atol=1e-9)
    assert result.passed and [entry["input"] for entry in result.details["inputs"]] == [0]


def test_forward_only_operator_with_definitions():
    op = d5ref.custom_op(d5.compile_custom_cppop(
        "times", source("forward_only.cpp"), [desc("int32", [4])], [desc("int64", [4])],
        additional_definitions={"FACTOR": 7}))
    np.testing.assert_array_equal(op(np.arange(4, dtype=np.int32)), np.arange(4) * 7)
    assert not op.descriptor.has_backward
    with pytest.raises(d5.CppOperatorError, match="no backward"):
        op.backward([None], [np.arange(4, dtype=np.int32)], [np.zeros(4, np.int64)])


def test_non_contiguous_inputs_are_made_contiguous(scale_add_f32):
    op = d5ref.custom_op(scale_add_f32)
    x = np.arange(12, dtype=np.float32).reshape(4, 3).T[:, :4]  # transposed: 3x4, F-order
    y = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(op(x, y), 2 * x + y)


# -- concurrency ---------------------------------------------------------------------------
CONCURRENT_SCRIPT = textwrap.dedent("""
    import json, sys
    import deep500 as d5
    d = d5.tensordesc("float32", [64])
    built = d5.compile_custom_cppop("scale_add", sys.argv[1], [d, d], [d])
    import numpy as np
    out = d5.CustomCPPOp(built)(np.ones(64, np.float32), np.ones(64, np.float32))
    print(json.dumps({"hit": built.cache_hit, "folder": built.folder,
                      "ok": bool((out == 3).all())}))
""")


@pytest.mark.slow
def test_two_processes_compiling_at_once_share_one_build(tmp_path):
    env = {**os.environ, "DEEP500_CACHE": str(tmp_path / "cache")}
    processes = [subprocess.Popen([sys.executable, "-c", CONCURRENT_SCRIPT,
                                   source("scale_add.cpp")], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    reports = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in reports)
    assert reports[0]["folder"] == reports[1]["folder"]
    assert sorted(r["hit"] for r in reports) == [False, True]  # exactly one built it
    entries = os.listdir(tmp_path / "cache" / "cppops")
    assert not [e for e in entries if ".tmp-" in e or ".stale-" in e], entries


# -- ahead of time -------------------------------------------------------------------------
def test_ahead_of_time_build_then_load_without_a_compiler(tmp_path, monkeypatch):
    folder = tmp_path / "aot"
    completed = subprocess.run(
        [sys.executable, "-m", "deep500", "compile", source("scale_add.cpp"), "--name",
         "scale_add", "--inputs", "float64:2x3", "float64:2x3", "--outputs", "float64:2x3",
         "--output-folder", str(folder)], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert "load_custom_cppop" in completed.stdout

    def no_compiler(*args, **kwargs):
        raise AssertionError("loading a prebuilt operator must not look for a compiler")
    monkeypatch.setattr(toolchain, "find_cxx_compiler", no_compiler)
    monkeypatch.setattr(toolchain, "find_cmake", no_compiler)
    loaded = d5.load_custom_cppop(str(folder))
    assert loaded.name == "scale_add" and loaded.input_descriptors[0].shape == (2, 3)
    op = d5ref.custom_op(loaded)
    x = np.full((2, 3), 1.5)
    np.testing.assert_array_equal(op(x, x), 3 * x)
    # A bare library file with its descriptors loads as well.
    bare = d5.load_custom_cppop(loaded.library_path, loaded.input_descriptors,
                                loaded.output_descriptors)
    np.testing.assert_array_equal(d5ref.custom_op(bare)(x, x), 3 * x)


def test_aot_cli_rejects_bad_descriptor_text(capsys):
    from deep500.cli import main
    status = main(["compile", source("scale_add.cpp"), "--name", "scale_add", "--inputs",
                   "float32-2x3", "--outputs", "float32:2x3"])
    assert status == 2
    assert "DTYPE:SHAPE" in capsys.readouterr().err


# -- errors --------------------------------------------------------------------------------
def test_compile_failure_names_the_error_and_keeps_the_log():
    d = desc("float32", [1])
    with pytest.raises(d5.CompilationError) as caught:
        d5.compile_custom_cppop("broken", source("broken.cpp"), [d], [d])
    error = caught.value
    assert any("undeclared_variable" in line for line in error.first_errors)
    assert os.path.isfile(error.log_path)
    assert error.log_path in str(error)
    assert "undeclared_variable" in open(error.log_path).read()


def test_missing_compiler_says_what_to_install(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(toolchain.ToolchainError, match="Install one"):
        d5.compile_custom_cppop("scale_add", source("scale_add.cpp"),
                                [desc("float32", [1])] * 2, [desc("float32", [1])])
    monkeypatch.setenv("CXX", "no-such-compiler")
    with pytest.raises(toolchain.ToolchainError, match=r"\$CXX"):
        toolchain.find_cxx_compiler()


def test_missing_cmake_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cmake", None)  # import cmake fails
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(toolchain.ToolchainError, match="pip install cmake"):
        toolchain.find_cmake()


def test_wrong_calls_raise_before_any_cpp_runs(scale_add_f32):
    op = d5ref.custom_op(scale_add_f32)
    good = np.ones((3, 4), np.float32)
    before = calls(scale_add_f32)
    with pytest.raises(d5.ShapeError, match="expected 2 inputs, got 1"):
        op(good)
    with pytest.raises(d5.ShapeError, match="dtype float64"):
        op(good, good.astype(np.float64))
    with pytest.raises(d5.ShapeError, match=r"shape \(4, 3\)"):
        op(good, good.T.copy())
    with pytest.raises(d5.ShapeError, match="output gradient 0"):
        op.backward([np.ones(3, np.float32)], [good, good], [good])
    assert calls(scale_add_f32) == before
    op(good, good)
    assert calls(scale_add_f32) == before + 1


def test_cpp_exception_becomes_a_python_error(scale_add_f32):
    op = d5ref.custom_op(scale_add_f32)
    x = np.ones((3, 4), np.float32)
    x[0, 0] = -12345
    with pytest.raises(d5.CppOperatorError, match="magic value"):
        op(x, x)


def test_factory_exception_becomes_a_python_error():
    with pytest.raises(d5.CppOperatorError, match="square matrix"):
        d5ref.custom_op(d5.compile_custom_cppop(
            "needs_square", source("failing_factory.cpp"), [desc("float32", [2, 3])],
            [desc("float32", [2, 3])]))


def test_missing_registration_is_explained():
    d = desc("float32", [1])
    with pytest.raises(d5.CppOperatorError, match="D500_REGISTER_OP"):
        d5ref.custom_op(d5.compile_custom_cppop("forgotten", source("unregistered.cpp"),
                                                [d], [d]))


def test_descriptors_that_disagree_with_the_cpp_signature():
    d = desc("float32", [3])
    built = d5.compile_custom_cppop("scale_add", source("scale_add.cpp"), [d], [d])
    with pytest.raises(d5.ShapeError, match=r"forward takes \(const float\*, const float\*, "
                                            r"float\*\)"):
        d5ref.custom_op(built)


@pytest.mark.parametrize("call, message", [
    (lambda: d5.compile_custom_cppop("bad-name", source("scale_add.cpp"),
                                     [desc("float32", [1])], [desc("float32", [1])]),
     "C identifier"),
    (lambda: d5.compile_custom_cppop("op", "/no/such/file.cpp", [desc("float32", [1])],
                                     [desc("float32", [1])]), "not found"),
    (lambda: d5.compile_custom_cppop("op", source("scale_add.cpp"), [desc("float16", [1])],
                                     [desc("float32", [1])]), "float16"),
    (lambda: d5.compile_custom_cppop("op", source("scale_add.cpp"), [[1, 2]],
                                     [desc("float32", [1])]), "tensordesc"),
    (lambda: d5.load_custom_cppop("/no/such/folder"), "does not exist"),
])
def test_bad_arguments_are_explained(call, message):
    with pytest.raises(d5.Deep500Error, match=message):
        call()


def test_output_folder_that_is_not_a_build_is_left_alone(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    d = desc("float32", [1])
    with pytest.raises(d5.Deep500Error, match="not a Deep500 build folder"):
        d5.compile_custom_cppop("scale_add", source("scale_add.cpp"), [d, d], [d],
                                output_folder=str(tmp_path))
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_rebuild_into_an_output_folder_replaces_the_old_build(tmp_path):
    folder = tmp_path / "op"
    d3, d4 = desc("float32", [3]), desc("float32", [4])
    first = d5.compile_custom_cppop("scale_add", source("scale_add.cpp"), [d3, d3], [d3],
                                    output_folder=str(folder))
    second = d5.compile_custom_cppop("scale_add", source("scale_add.cpp"), [d4, d4], [d4],
                                     output_folder=str(folder))
    assert not second.cache_hit and second.cache_key != first.cache_key
    assert json.load(open(folder / "manifest.json"))["inputs"][0]["shape"] == [4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["op", "op.lock"]


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DEEP500_CACHE", str(tmp_path))
    assert cpp_compiler.cache_root() == os.path.join(str(tmp_path), "cppops")


def test_header_is_installed_with_the_package():
    import deep500
    header = os.path.join(os.path.dirname(deep500.__file__), "lv0_operators", "include",
                          "deep500", "deep500.h")
    text = open(header).read()
    for name in ("D500_REGISTER_OP", "D500_EXPORTED", "tensor_t", "CustomOperator"):
        assert name in text
    setup = open(os.path.join(os.path.dirname(deep500.__file__), "..", "setup.py")).read()
    assert "lv0_operators/include/deep500/*.h" in setup
