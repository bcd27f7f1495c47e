"""Glue libraries link with gold when the compiler can use it (toolchain.fast_linker_flags,
glue_build.build): GNU ld takes ~12 CPU-s to read TensorFlow's libtensorflow_cc.so.2."""
import ctypes
import json
import os
import shutil

import pytest

from deep500.lv0_operators import glue_build, toolchain

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler")


@pytest.fixture
def probe(monkeypatch):
    """fast_linker_flags with the given candidates, probed afresh."""
    def run(candidates):
        monkeypatch.setattr(toolchain, "FAST_LINKERS", candidates)
        toolchain.fast_linker_flags.cache_clear()
        return toolchain.fast_linker_flags(toolchain.find_cxx_compiler())
    yield run
    toolchain.fast_linker_flags.cache_clear()


def test_a_linker_the_compiler_cannot_use_leaves_the_default(probe):
    assert probe(("d500-no-such-linker",)) == ()


@pytest.mark.skipif(shutil.which("ld.gold") is None, reason="gold is not installed")
def test_the_first_usable_linker_is_chosen(probe):
    assert probe(("d500-no-such-linker", "gold")) == ("-fuse-ld=gold",)


def test_a_glue_build_links_with_the_chosen_linker_and_records_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP500_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "answer.cpp"
    source.write_text('extern "C" int d500_answer() { return 42; }\n')
    flags = list(toolchain.fast_linker_flags(toolchain.find_cxx_compiler()))
    built = glue_build.build("d500_answer", "the test's glue", str(source), "libanswer.so",
                             ["-shared", "-fPIC", "-O2"], [], {"test": 1},
                             expected_seconds=1)
    assert not built.cache_hit
    assert built.manifest["linker_flags"] == flags
    with open(os.path.join(built.folder, "manifest.json"), encoding="utf-8") as handle:
        assert json.load(handle)["linker_flags"] == flags
    command = open(os.path.join(built.folder, "build.log"), encoding="utf-8").readline()
    assert all(f" {flag} " in command for flag in flags), command
    assert ctypes.CDLL(built.library_path).d500_answer() == 42
    again = glue_build.build("d500_answer", "the test's glue", str(source), "libanswer.so",
                             ["-shared", "-fPIC", "-O2"], [], {"test": 1},
                             expected_seconds=1)
    assert again.cache_hit and again.folder == built.folder
