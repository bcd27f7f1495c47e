"""A C++ source as a framework alternative in operator recipes."""
import textwrap

import pytest

from deep500.recipe import load_recipe, run_recipe
from deep500.recipe.cpp_kernel import output_shapes
from deep500.recipe.operator_spec import OperatorSpec
from deep500.results.files import read_results
from deep500.utils.errors import RecipeError

RECIPE = textwrap.dedent("""
    name: kernels
    experiment: operators
    fixed: {dtype: DTYPE, threads: 1, seed: 0}
    mutable:
      framework: [reference, KERNEL]
      operator:
        - {op: Relu, shape: [3, 50]}
        - {op: Softmax, shape: [4, 10], axis: -1}
    metrics:
      WallclockTime: {reruns: 3, warmup: 1}
      L2Error: {}
    acceptance: ["L2Error.relative <= 1e-6"]
""")


def write(tmp_path, kernel, dtype="float64", text=RECIPE):
    path = tmp_path / "kernels.yaml"
    path.write_text(text.replace("KERNEL", kernel).replace("DTYPE", dtype))
    return str(path)


def test_kernel_runs_on_its_operator_and_skips_the_others(tmp_path, repo_root):
    kernel = f"{{cpp: {repo_root / 'recipes' / 'kernels' / 'softmax.cpp'}, op: Softmax}}"
    summary = run_recipe(write(tmp_path, kernel), str(tmp_path / "out"), progress=False)
    assert summary.ok
    records = read_results(str(tmp_path / "out"))
    by_kind = {}
    for record in records:
        by_kind.setdefault(record["kind"], []).append(record)
    assert len(by_kind["measurement"]) == 3 and len(by_kind["skipped"]) == 1
    assert "implements Softmax, not Relu" in by_kind["skipped"][0]["reason"]
    measured = [r for r in by_kind["measurement"]
                if r["configuration"]["framework"] == "cpp-softmax"][0]
    assert measured["configuration"]["cpp_kernel"]["op"] == "Softmax"
    l2 = {m["metric"]: m for m in measured["result"]["metrics"]}["L2Error"]
    assert l2["summary"]["relative"] <= 1e-12  # float64 kernel against float64 reference
    assert "cpp-softmax" in (tmp_path / "out" / "report.md").read_text()


def test_kernel_source_relative_to_the_recipe(tmp_path, repo_root):
    (tmp_path / "relu.cpp").write_text((repo_root / "recipes" / "kernels" / "relu.cpp")
                                       .read_text())
    recipe = load_recipe(write(tmp_path, "{cpp: relu.cpp, op: Relu, name: my_relu}"))
    kernel = recipe.alternatives("framework")[1]
    assert kernel.source == str(tmp_path / "relu.cpp") and str(kernel) == "cpp-my_relu"


@pytest.mark.parametrize("kernel, message", [
    ("{cpp: missing.cpp, op: Relu}", "does not exist"),
    ("{cpp: broken.cpp, op: Relu}", "failed to build"),
    ("{cpp: broken.cpp, op: Gemm}", "no Gemm operator"),
    ("{cpp: broken.cpp}", "needs 'cpp'"),
    ("{cpp: broken.cpp, op: Relu, flags: 1}", "unexpected keys"),
])
def test_bad_kernels_are_refused_before_anything_runs(tmp_path, kernel, message):
    (tmp_path / "broken.cpp").write_text("#include <deep500/deep500.h>\nthis is not C++;\n")
    out = tmp_path / "out"
    with pytest.raises(RecipeError, match=message):
        run_recipe(write(tmp_path, kernel), str(out), progress=False)
    assert not (out / "results.jsonl").exists()


def test_output_shapes_from_onnx_shape_inference():
    conv = OperatorSpec("Conv", ((2, 3, 9, 9), (4, 3, 3, 3)),
                        {"pads": [1, 1, 1, 1], "strides": [2, 2]})
    assert output_shapes(conv, "float32") == [(2, 4, 5, 5)]
    with pytest.raises(RecipeError, match="shape inference"):
        output_shapes(OperatorSpec("Gemm", ((2, 3), (4, 5))), "float32")
