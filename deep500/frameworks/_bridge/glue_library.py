"""A bridge's C++ glue library: one source file compiled with the framework's own flags,
once per installation, and loaded on first use; when it cannot be had, a warning once and
the bridge's Python path.

The PyTorch glue and the TensorFlow eager glue are CPython extension modules
(:func:`python_extension`: Python's headers, the interpreter's extension suffix, its
cache tag in the cache key); the TensorFlow kernel is an op library that TensorFlow
loads itself. Building, the cache and its lock are ``deep500.lv0_operators.glue_build``'s;
a bridge hands over only what differs: its flags and version fields (``configure``),
its names and texts, and how a built library is loaded.
"""
from __future__ import annotations

import sys
import sysconfig
from typing import Callable

from deep500.lv0_operators import glue_build

#: () -> (the framework's compiler and linker flags, the JSON fields of the cache key
#: that name the framework's version); raises a Deep500Error when the framework cannot
#: build it (headers missing, ...).
Configure = Callable[[], "tuple[list[str], dict]"]


class GlueLibrary:
    """One glue library of a bridge.

    Args:
        name: the library's name (cache folder ``<name>-<key>``, extension module name).
        what: the library in messages ("Deep500's PyTorch glue").
        source: the one C++ source file.
        library_file: the file the compiler writes.
        switch: the environment variable whose value ``0`` selects the fallback.
        fallback: what runs instead, in words, for the warning.
        category: the warning's class.
        cxxflags: the compiler's own flags (``-shared -fPIC -O2 ...``).
        configure: see :data:`Configure`.
        expected_seconds: about how long a build takes (said before building).
        load: the built library -> what the bridge calls (a module, an op library).
    """

    def __init__(self, name: str, what: str, source: str, library_file: str, switch: str,
                 fallback: str, category: type, cxxflags: list[str], configure: Configure,
                 expected_seconds: float, load: Callable[[glue_build.GlueBuild], object]):
        self.name, self.what, self.source, self.library_file = name, what, source, library_file
        self.switch, self.cxxflags, self.expected_seconds = switch, cxxflags, expected_seconds
        self.configure = configure
        # Looked up at each build, so that a replaced build (a test's) is the one called.
        self.loader = glue_build.GlueLoader(what, switch, fallback, category,
                                            lambda: self.build(), load)

    def build(self, live_output: bool = False) -> glue_build.GlueBuild:
        """Build the library for this installation, or find it in the cache. Raises
        ``d5.CompilationError``, a ``ToolchainError`` (no compiler) or a ``Deep500Error``
        (the framework cannot build it)."""
        flags, key_fields = self.configure()
        return glue_build.build(self.name, self.what, self.source, self.library_file,
                                self.cxxflags, flags, key_fields, self.expected_seconds,
                                live_output=live_output)

    def enabled(self) -> bool:
        """False when the switch (``<switch>=0``) selects the fallback."""
        return self.loader.enabled()

    def get(self, honour_switch: bool = True, stacklevel: int = 2):
        """What ``load`` returned, built on first use; None when unavailable (warned once
        per process, at ``stacklevel`` above the caller as ``warnings.warn`` counts) or,
        unless ``honour_switch`` is False, disabled by the switch."""
        return self.loader.get(honour_switch, stacklevel=stacklevel + 1)


def python_extension(name: str, what: str, source: str, switch: str, fallback: str,
                     category: type, cxxflags: list[str], configure: Configure,
                     expected_seconds: float) -> GlueLibrary:
    """A :class:`GlueLibrary` that is the CPython extension module ``name``: compiled
    against Python's headers as well as the framework's (``configure``), named with the
    interpreter's extension suffix, keyed by its cache tag, imported when loaded."""

    def with_python() -> tuple[list[str], dict]:
        flags, key_fields = configure()
        flags = [*flags, f"-I{glue_build.python_include()}"]
        if sys.platform == "darwin":  # Python's symbols come from the loading interpreter
            flags += ["-undefined", "dynamic_lookup"]
        return flags, {**key_fields, "python": sys.implementation.cache_tag, "flags": flags}

    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return GlueLibrary(name, what, source, name + suffix, switch, fallback, category,
                       cxxflags, with_python, expected_seconds,
                       lambda built: glue_build.load_extension(name, built))


__all__ = ["Configure", "GlueLibrary", "python_extension"]
