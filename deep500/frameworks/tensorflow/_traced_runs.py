"""The traced functions of a TensorFlow executor in mode='function'
(``deep500.frameworks.tensorflow.executor``)."""
from __future__ import annotations

from typing import Callable

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._value_kinds import flatten, unflatten


class TracedRuns:
    """The traced functions of an executor in mode='function', for one version of the
    network's graph: a ``tf.function`` traced once per pass (inference, or backprop
    from ``y``), input names, static input values and input shapes and dtypes, and
    called through its concrete function with the tensors as flat arguments (which
    skips ``tf.function``'s per-call matching of structured arguments)."""

    def __init__(self, forward: Callable, backward: Callable, jit_compile: bool,
                 autograph: bool):
        self._bodies = {None: forward, "backward": backward}
        self._options = dict(jit_compile=jit_compile, autograph=autograph)
        self._functions: dict[tuple, Callable] = {}
        self.traces = 0

    def __call__(self, y: str | None, feeds: dict, frozen: dict, update=None):
        """Outputs (inference, ``y`` None) or (outputs, gradients) (backprop from
        ``y``) for ``feeds`` ({name: value}) and the ``frozen`` static inputs;
        ``update`` is the executor's ``fused_update`` the body traces in, if any.
        Sequence and optional feeds are traced for their structure (``_value_kinds``)."""
        names = tuple(feeds)
        structure, tensors = flatten(tuple(feeds.values()))
        key = (y, update, names, structure, tuple(frozen.items()),
               tuple((t.dtype, tuple(t.shape)) for t in tensors))
        function = self._functions.get(key)
        if function is None:
            function = self._trace(y, names, structure, frozen, tensors)
            self._functions[key] = function
        return function(*tensors)

    def _trace(self, y, names, structure, frozen, tensors):
        if y is None:
            forward = self._bodies[None]

            def body(*flat):
                return forward(dict(zip(names, unflatten(structure, flat))), frozen)
        else:
            backward = self._bodies["backward"]

            def body(*flat):
                return backward(dict(zip(names, unflatten(structure, flat))), frozen, y)
        self.traces += 1
        return tf.function(body, **self._options).get_concrete_function(*tensors)
