"""``OnnxModel.freeze``: floating initializers an exporter made as constants stay
constant in every executor built from the model (no parameter, no gradient), and bad
patterns say what the initializers are."""
import importlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from deep500.lv1_network.network import gradient_name
from deep500.utils.errors import Deep500Error
from deep500.utils.onnx_interop.parser import load_and_parse_model

EXECUTORS = {"reference": "numpy", "pytorch": "torch", "tensorflow": "tensorflow",
             "onnxruntime": "onnxruntime"}


def model():
    """loss = ReduceSum((X·W + B + const_fold_opt__7)²): the last term is what tf2onnx
    names a folded constant."""
    rng = np.random.default_rng(0)
    inits = {"W": rng.standard_normal((3, 2)).astype(np.float32),
             "B": rng.standard_normal(2).astype(np.float32),
             "const_fold_opt__7": np.full(2, 0.5, np.float32)}
    nodes = [helper.make_node("Gemm", ["X", "W", "B"], ["Y"]),
             helper.make_node("Add", ["Y", "const_fold_opt__7"], ["Z"]),
             helper.make_node("Mul", ["Z", "Z"], ["S"]),
             helper.make_node("ReduceSum", ["S"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "frozen", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(v, n) for n, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_freeze_names_what_it_matched_and_parameters_drop_it():
    parsed = load_and_parse_model(model())
    assert parsed.parameters == ["W", "B", "const_fold_opt__7"]
    assert parsed.freeze(r"const_fold_opt__\d+") == ["const_fold_opt__7"]
    assert parsed.parameters == ["W", "B"]


@pytest.mark.parametrize("pattern,message", [
    ("nothing.*", r"matches no floating-point initializer; they are: W, B, const_fold"),
    ("(", "is not a regular expression")])
def test_a_bad_pattern_says_what_is_there(pattern, message):
    with pytest.raises(Deep500Error, match=message):
        load_and_parse_model(model()).freeze(pattern)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_every_executor_keeps_a_frozen_initializer_constant(executor):
    pytest.importorskip(EXECUTORS[executor])
    parsed = load_and_parse_model(model())
    parsed.freeze("const_fold_opt__7")
    built = importlib.import_module(f"deep500.frameworks.{executor}").from_onnx(parsed)
    assert sorted(built.network.get_params()) == ["B", "W"]
    if executor == "onnxruntime":
        return  # inference only
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    out = built.inference_and_backprop({"X": x}, "loss")
    assert gradient_name("W") in out and gradient_name("B") in out
    assert gradient_name("const_fold_opt__7") not in out


def test_a_model_file_can_carry_its_frozen_initializers(tmp_path):
    """The metadata entry ``deep500.frozen`` (what a recipe's ``network.frozen`` writes)
    freezes at parse time; a bad entry is a ModelError naming the file."""
    import json
    from onnx import helper as h
    from deep500.utils.errors import ModelError
    from deep500.utils.onnx_interop.parser import FROZEN_METADATA
    proto = model()
    h.set_model_props(proto, {FROZEN_METADATA: json.dumps([r"const_fold_opt__\d+"])})
    assert load_and_parse_model(proto).parameters == ["W", "B"]
    h.set_model_props(proto, {FROZEN_METADATA: "const_fold"})
    with pytest.raises(ModelError, match="must be a JSON list of regular expressions"):
        load_and_parse_model(proto)
    h.set_model_props(proto, {FROZEN_METADATA: json.dumps(["nothing"])})
    with pytest.raises(ModelError, match="matches no floating-point initializer"):
        load_and_parse_model(proto)


def test_a_recipe_network_freezes_by_pattern(tmp_path):
    import onnx
    from deep500.recipe.experiments.networks import parse_network
    from deep500.utils.errors import RecipeError
    path = tmp_path / "m.onnx"
    onnx.save(model(), str(path))
    spec = parse_network({"file": "m.onnx", "frozen": r"const_fold_opt__\d+"}, "network",
                         str(tmp_path))
    assert spec.frozen == (r"const_fold_opt__\d+",)
    assert load_and_parse_model(spec.build(1, "float32", 0, None)).parameters == ["W", "B"]
    with pytest.raises(RecipeError, match=r"network.frozen: '\(' is not a regular expression"):
        parse_network({"file": "m.onnx", "frozen": ["("]}, "network", str(tmp_path))
    with pytest.raises(RecipeError, match="a string or a list of strings"):
        parse_network({"model": "mlp", "frozen": 3}, "network", str(tmp_path))
