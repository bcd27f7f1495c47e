"""ONNX fuzzer: seeded byte and structure mutations of small real models, each through
the parser and then every executor (reference, PyTorch, TensorFlow, onnxruntime).

Models mutated (``onnx_mutations.base_models``): the zoo's ``mlp`` (1×4×4 input, one
hidden layer of 8) and ``lenet``, both with batch 2, and a hand-built MatMul → Add →
Relu → Reshape → Transpose → Softmax graph with an int64 shape initializer.

Cases (seed ``SEED``; every mutation in turn, the base and the mutation's seed drawn):

* ``BYTE_CASES`` = 300 byte mutations of the serialized file (bit flips, truncations,
  insertions, deletions, overwrites, files that are not ONNX), written to a file;
* ``STRUCTURE_CASES`` = 600 structure mutations of the ``ModelProto`` (an operator's
  type or domain, a node's inputs and outputs, an attribute's type or value, an
  initializer's dims, element type or data, the graph's inputs and outputs, cycles,
  node order, opset and IR version).

Each case is parsed with ``check=True``; a model the checks refuse is parsed again with
``check=False`` (what a user who turns the checks off gets). Every model that parses
goes through ALL FOUR executors: ``from_onnx``, then one ``inference`` with inputs of
its declared shapes and dtypes. So 900 cases reach the parser (twice: once per test of
the parser, once before the executors), and the 505 models that parse (71 of the byte
cases, 434 of the structure cases) each reach the four executors: 2,020 executor cases.
A test fails if anything but a ``Deep500Error`` escapes, listing every escape with its
case id (``kind:base:mutation:seed``, reproduced by ``onnx_mutations.Case``). The file
takes about 18 s of CPU time (10 to 35 s wall on a 2-core machine that other work
shared), most of it importing and running TensorFlow.

The same cases before the parser and executors converted library errors: 78 escaped
the parser (72 ValueError, 4 TypeError, 2 KeyError), 47 the reference executor (46
TypeError, 1 AttributeError), 291 PyTorch's (211 TypeError, 40 AttributeError, 38
RuntimeError, 2 IndexError), 73 TensorFlow's (27 InvalidArgumentError, 23 TypeError,
12 ValueError, 5 AttributeError, 2 IndexError, 2 NotFoundError, 1 AbortedError, 1
UnimplementedError) and one case aborted the process inside TensorFlow (a 3-D input
reaching oneDNN's Conv); none escaped onnxruntime's.
"""
from __future__ import annotations

import collections
import importlib
import traceback
import warnings

import pytest

from deep500.utils.errors import Deep500Error, ModelError
from deep500.utils.onnx_interop.parser import load_and_parse_model
from tests.fuzz import onnx_mutations

pytestmark = pytest.mark.slow

SEED = 17
BYTE_CASES = 300
STRUCTURE_CASES = 600
EXECUTORS = {
    "reference": "deep500.frameworks.reference",
    "pytorch": "deep500.frameworks.pytorch",
    "tensorflow": "deep500.frameworks.tensorflow",
    "onnxruntime": "deep500.frameworks.onnxruntime",
}
COUNTS = {"bytes": BYTE_CASES, "structure": STRUCTURE_CASES}


@pytest.fixture(scope="module")
def bases():
    return onnx_mutations.base_models()


def _escape(case, stage, exc) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    return (f"{case.id} [{stage}] {type(exc).__name__}: {str(exc)[:200]} "
            f"({frame.filename}:{frame.lineno})")


def _parse(case, model, tmp_path, escapes):
    """The parsed model, or None; a Deep500Error is a pass, anything else an escape."""
    source = model
    if isinstance(model, bytes):
        source = tmp_path / f"{case.base}.onnx"
        source.write_bytes(model)
    for check in (True, False):
        try:
            return load_and_parse_model(source, check=check)
        except Deep500Error as exc:
            if isinstance(model, bytes) and check and isinstance(exc, ModelError):
                assert str(source) in str(exc), f"{case.id}: {exc} names no file"
        except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
            escapes.append(_escape(case, f"parser check={check}", exc))
            return None
    return None


@pytest.mark.parametrize("kind", ["bytes", "structure"])
def test_parser_lets_only_deep500_errors_out(bases, tmp_path, kind):
    escapes, parsed = [], 0
    for case in onnx_mutations.cases(SEED, COUNTS[kind], kind):
        parsed += _parse(case, case.build(bases), tmp_path, escapes) is not None
    assert not escapes, f"{len(escapes)} escaped the parser:\n" + "\n".join(escapes)
    # The cases reach past the parser: otherwise the executors' tests test nothing.
    assert parsed >= COUNTS[kind] // 10, parsed


@pytest.mark.parametrize("kind", ["bytes", "structure"])
@pytest.mark.parametrize("executor", list(EXECUTORS))
def test_executor_lets_only_deep500_errors_out(bases, tmp_path, executor, kind):
    framework = importlib.import_module(EXECUTORS[executor])
    escapes = []
    outcomes = collections.Counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in onnx_mutations.cases(SEED, COUNTS[kind], kind):
            model = _parse(case, case.build(bases), tmp_path, escapes)
            if model is None:
                continue
            stage = "build"
            try:
                runner = framework.from_onnx(model)
                stage = "inference"
                runner.inference(onnx_mutations.feeds_for(model))
                outcomes["ran"] += 1
            except Deep500Error as exc:
                outcomes[f"{stage}: {type(exc).__name__}"] += 1
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
                escapes.append(_escape(case, stage, exc))
    assert not escapes, (f"{len(escapes)} escaped the {executor} executor "
                         f"({dict(outcomes)}):\n" + "\n".join(escapes))
    # Mutated models both run and fail inside the executor: both paths are exercised
    # (most byte mutations that parse change only weights, so few of them fail here).
    assert outcomes["ran"] >= 20, dict(outcomes)
    failed = sum(outcomes.values()) - outcomes["ran"]
    assert failed >= (1 if kind == "bytes" else 20), dict(outcomes)
