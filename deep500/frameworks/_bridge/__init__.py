"""What every framework bridge needs alike, written once: node errors, the inner
networks of control-flow bodies, native-operator test wrappers, optimizer wrappers over a
framework's native optimizer class, and the loading of a bridge's C++ glue.

A module here imports no framework: a bridge hands it what differs (its tensor
conversion, its native class, its network factory) and keeps only that.

* ``node_errors.py``: one error message for a node a bridge cannot build or run.
* ``inner_network.py``: the factory of control-flow bodies' networks, by bridge.
* ``native_ops.py``: ONNX operators as one framework call each (builders by ONNX name),
  and the options of a framework function wrapped as a ``d5.CustomOp``.
* ``nativeop_checks.py``: ``test_nativeop_forward`` / ``test_nativeop_gradient``.
* ``native_optimizer.py``: the base of a framework's optimizers behind Deep500's
  ``Optimizer``; ``named_optimizers.py``: the reference optimizers' names and defaults.
* ``glue_library.py``: building and loading a bridge's C++ glue library.
"""
