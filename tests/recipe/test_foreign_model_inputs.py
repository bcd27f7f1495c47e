"""A foreign ONNX model trained by name: a model exported by torch.onnx.export with its
input called ``x`` and its output ``logits`` trains in a recipe, fed from the dataset's
``input`` field (its only input, or ``inputs: {x: input}``), and the report says which
field feeds which input; a wrong mapping is refused before anything runs. The graph
rename itself (inputs, the output's producer, readers in subgraphs) on a hand-built
graph."""
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from deep500.recipe import run_recipe
from deep500.recipe.schema import load_recipe
from deep500.results.files import read_results
from deep500.utils.errors import Deep500Error, RecipeError
from deep500.utils.onnx_interop.input_names import (fed_inputs, rename_graph_inputs,
                                                    rename_only_output)

RECIPE = textwrap.dedent("""
    name: foreign
    experiment: training
    fixed:
      dataset: {name: digits, normalize: standardize}
      network: NETWORK
      batch_size: 32
      epochs: 1
      threads: 1
      seed: 0
    mutable:
      optimizer: [{type: sgd, learning_rate: 0.1}]
      executor: [reference]
    metrics:
      TestAccuracy: {}
""")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """An MLP for the digits exported by torch.onnx.export: input x, output logits."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32),
                                torch.nn.ReLU(), torch.nn.Linear(32, 10))
    path = tmp_path_factory.mktemp("foreign") / "m.onnx"
    torch.onnx.export(model, (torch.randn(2, 1, 8, 8),), str(path), input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "N"},
                                                             "logits": {0: "N"}},
                      opset_version=17, dynamo=False)
    assert fed_inputs(onnx.load(str(path))) == ["x"]
    return path


@pytest.mark.parametrize("network", ["{file: m.onnx}", "{file: m.onnx, inputs: {x: input}}"])
def test_an_exported_model_trains_from_the_datasets_input(exported, tmp_path, network):
    recipe = tmp_path / "r.yaml"
    (tmp_path / "m.onnx").write_bytes(exported.read_bytes())
    recipe.write_text(RECIPE.replace("NETWORK", network))
    summary = run_recipe(str(recipe), str(tmp_path / "out"), progress=False)
    assert summary.ok
    [record] = [r for r in read_results(str(tmp_path / "out")) if r["kind"] == "measurement"]
    assert record["configuration"]["network"]["inputs"] == {"x": "input"}
    accuracy = {m["metric"]: m for m in record["result"]["metrics"]}["TestAccuracy"]
    # the accuracy reads the model's output (renamed from logits); chance is 0.1
    assert accuracy["summary"]["final"] > 0.5
    report = (tmp_path / "out" / "report.md").read_text()
    assert "The ONNX file m.onnx is fed by the dataset: its input x takes the field " \
           "input." in report


@pytest.mark.parametrize("network, says", [
    ("{file: m.onnx, inputs: {y: input}}", r"the model has no input \['y'\]; its inputs "
                                           r"are \['x'\]"),
    ("{file: m.onnx, inputs: [x]}", "map the model's graph inputs to dataset fields"),
])
def test_a_wrong_mapping_is_refused_when_the_recipe_is_read(exported, tmp_path, network,
                                                            says):
    (tmp_path / "m.onnx").write_bytes(exported.read_bytes())
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.replace("NETWORK", network))
    with pytest.raises(RecipeError, match=says):
        load_recipe(str(recipe))


def _graph_with_a_subgraph():
    # y = If(c) then (x + 1) else (-x * 2): both branches read the outer x.
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])], [one])
    other = helper.make_graph(
        [helper.make_node("Mul", ["z", "two"], ["e"])], "else", [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])], [two])
    nodes = [helper.make_node("Neg", ["x"], ["z"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                     helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_rename_reaches_every_reader_and_producer():
    model = _graph_with_a_subgraph()
    renamed = rename_only_output(rename_graph_inputs(model, {"x": "input"}), "output")
    onnx.checker.check_model(renamed, full_check=True)
    assert fed_inputs(renamed) == ["input", "c"]
    assert [o.name for o in renamed.graph.output] == ["output"]
    nodes = renamed.graph.node
    assert list(nodes[0].input) == ["input"] and list(nodes[1].output) == ["output"]
    branches = {a.name: a.g for a in nodes[1].attribute}
    assert list(branches["then_branch"].node[0].input) == ["input", "one"]
    assert list(branches["else_branch"].node[0].input) == ["z", "two"]
    # the original is untouched, and both graphs compute the same with onnxruntime
    assert fed_inputs(model) == ["x", "c"]
    ort = pytest.importorskip("onnxruntime")
    x = np.array([1.0, 2.0, 3.0], np.float32)
    for c in (True, False):
        before = ort.InferenceSession(model.SerializeToString()).run(
            None, {"x": x, "c": np.array(c)})[0]
        after = ort.InferenceSession(renamed.SerializeToString()).run(
            None, {"input": x, "c": np.array(c)})[0]
        np.testing.assert_array_equal(before, after)


def test_a_rename_onto_a_taken_name_or_a_missing_input_says_which():
    model = _graph_with_a_subgraph()
    with pytest.raises(Deep500Error, match=r"\['z'\] already name tensors"):
        rename_graph_inputs(model, {"x": "z"})
    with pytest.raises(Deep500Error, match=r"has no input \['w'\]; its inputs are "
                                           r"\['x', 'c'\]"):
        rename_graph_inputs(model, {"w": "input"})
    assert rename_graph_inputs(model, {"x": "x"}) is model
