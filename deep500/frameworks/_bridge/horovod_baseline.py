"""Horovod (Sergeev & Del Balso, "Horovod: fast and easy distributed deep learning in
TensorFlow", arXiv:1802.05799, 2018) as a native distributed baseline: not available in
this installation, and the recipe says why when it is read.

Horovod ships only as a source distribution; ``pip install horovod==0.28.1`` (the
registry's newest) compiles its C++ core and its PyTorch and TensorFlow operators
against the installed frameworks. Against this project's pins (torch 2.13.0, tensorflow
2.21.0, cmake 4.4.5, MPICH 5.0.2) it did not build (docs/distributed.md, "Horovod",
keeps the decisive lines): in pip's isolated build environment the ``cmake`` wrapper
cannot import its own package; without isolation, cmake 4 refuses the bundled gloo's
``cmake_minimum_required`` below 3.5; with ``CMAKE_POLICY_VERSION_MINIMUM=3.5`` it
configured (MPI, TensorFlow and PyTorch found) but was still compiling the bundled gloo
(38%, none of Horovod's own sources) when the 20-minute budget ran out. No vendored copy
is used instead. ``{framework: pytorch|tensorflow, scheme: Horovod}`` in a recipe is
refused with that reason when the recipe is checked.
"""
from __future__ import annotations

import importlib.util

from deep500.utils.errors import Deep500Error

NOT_BUILT = (
    "horovod 0.28.1 from the registry did not build against the pinned torch 2.13.0 / "
    "tensorflow 2.21.0 with cmake 4.4.5: the bundled gloo's cmake_minimum_required is "
    "below 3.5, which cmake 4 refuses, and with CMAKE_POLICY_VERSION_MINIMUM=3.5 the "
    "build ran past 20 minutes on 2 cores before reaching Horovod's own sources")


def unavailable_reason(framework: str) -> str:
    """Why the Horovod baseline of ``framework`` cannot run here."""
    module = f"horovod.{'torch' if framework == 'pytorch' else 'tensorflow'}"
    try:
        installed = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        native = {"pytorch": "PyTorchDistributedDataParallel"}.get(
            framework, "MultiWorkerMirroredStrategy")
        return (f"Horovod is not installable here ({module} is missing): {NOT_BUILT}. "
                f"See docs/distributed.md, 'Horovod'; compare with {framework}'s "
                f"{native} instead")
    return (f"{module} is installed, but Deep500 has no Horovod baseline: Horovod could "
            f"not be built where Deep500 is tested ({NOT_BUILT}), so none was written "
            f"against it. See docs/distributed.md, 'Horovod'")


def horovod_baseline(framework: str) -> type:
    """The recipe entry ``{framework: <framework>, scheme: Horovod}``: refused when the
    recipe is checked (``check_options``) or the class is built, with the reason."""

    class Horovod:
        __doc__ = f"Horovod's DistributedOptimizer over {framework}: unavailable here."

        def __init__(self, base_optimizer, comm=None):
            raise Deep500Error(unavailable_reason(framework))

        @classmethod
        def check_options(cls) -> None:
            raise Deep500Error(unavailable_reason(framework))

    return Horovod


__all__ = ["NOT_BUILT", "horovod_baseline", "unavailable_reason"]
