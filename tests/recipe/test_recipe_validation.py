"""Bad recipes fail before any work starts, naming the key and the problem."""
import textwrap

import pytest

from deep500.recipe import load_recipe, parse_recipe
from deep500.utils.errors import RecipeError

VALID = {
    "name": "t",
    "fixed": {"dtype": "float32", "threads": 1},
    "mutable": {"framework": ["reference", "pytorch"],
                "operator": [{"op": "Relu", "shape": [4, 5]},
                             {"op": "Gemm", "from": "deepbench_gemm.csv", "row": 138}]},
    "metrics": {"WallclockTime": {"reruns": 5, "warmup": 1}, "L2Error": {}},
    "acceptance": ["L2Error.relative <= 1e-4"],
}


def recipe(**changes):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in VALID.items()}
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def test_valid_recipe_plans_the_cross_product():
    parsed = parse_recipe(recipe())
    configurations = parsed.configurations()
    assert len(configurations) == 4
    # Operators vary slowest so consecutive runs share inputs.
    assert [c["operator"].op_type for c in configurations] == ["Relu", "Relu", "Gemm", "Gemm"]
    assert [c["framework"] for c in configurations] == ["reference", "pytorch"] * 2
    gemm = configurations[2]["operator"]
    assert gemm.input_shapes == ((512, 512), (16, 512)) and gemm.attributes["transB"] == 1
    assert configurations[0]["seed"] == 0 and configurations[0]["device"] == "cpu"


@pytest.mark.parametrize("changes, message", [
    ({"bogus": 1}, "unknown keys ['bogus']"),
    ({"fixed": {"framework": "reference"}}, "['framework'] are both fixed and mutable"),
    ({"fixed": {"colour": "red"}}, "fixed.colour: unknown component"),
    ({"fixed": {"dtype": "float13"}}, "fixed.dtype: dtype must be float32 or float64"),
    ({"fixed": {"threads": 0}}, "fixed.threads: expected a positive integer"),
    ({"fixed": {"threads": "two"}}, "fixed.threads: expected a positive integer"),
    ({"mutable": {"framework": ["reference", "caffe"],
                  "operator": [{"op": "Relu", "shape": [2]}]}},
     "mutable.framework[1]: unknown framework 'caffe'"),
    ({"mutable": {"framework": [], "operator": [{"op": "Relu", "shape": [2]}]}},
     "mutable.framework: must be a non-empty list"),
    ({"mutable": {"framework": ["reference"]}}, "component 'operator' is required"),
    ({"mutable": {"framework": ["reference"],
                  "operator": [{"op": "Gemm", "from": "missing.csv", "row": 0}]}},
     "does not exist"),
    ({"mutable": {"framework": ["reference"],
                  "operator": [{"op": "Gemm", "from": "deepbench_gemm.csv", "row": 10**6}]}},
     "operator[0].row: must be an integer in [0,"),
    ({"mutable": {"framework": ["reference"], "operator": [{"op": "Relu", "shape": [2, -1]}]}},
     "a shape must be a list of positive integers"),
    ({"mutable": {"framework": ["reference"], "operator": [{"op": "Frobnicate", "shape": [2]}]}},
     "no operator 'Frobnicate'"),
    ({"mutable": {"framework": ["pytorch"], "operator": [{"op": "Pad", "shape": [2]}]}},
     "No PyTorch native wrapper for 'Pad'"),
    ({"mutable": {"framework": ["reference"],
                  "operator": [{"op": "Relu", "shape": [2], "colour": 1}]}},
     "Relu has no attributes ['colour']"),
    ({"metrics": {"Stopwatch": {}}}, "unknown metric 'Stopwatch'"),
    ({"metrics": {"WallclockTime": {"reruns": 0}}}, "metrics.WallclockTime: bad parameters"),
    ({"metrics": {"WallclockTime": {"laps": 3}}}, "metrics.WallclockTime: bad parameters"),
    ({"acceptance": ["L2Error.relative < 1e-4"]}, "the direction is required"),
    ({"acceptance": ["MaxError.relative <= 1e-4"]}, "names metric 'MaxError', which the recipe"),
    ({"acceptance": ["L2Error.relative <= small"]}, "is not a number"),
    ({"experiment": "alchemy"}, "experiment: 'alchemy' is not supported"),
    ({"fixed": {"device": "gpu:99"}}, "the NumPy reference runs on the CPU only"),
    ({"fixed": {"device": "gpu:99"}, "mutable": {"framework": ["pytorch"], "operator": [
        {"op": "Relu", "shape": [2]}]}}, "device gpu:99 is not available"),
    ({"fixed": {"device": "tpu"}}, "fixed.device: Unknown device 'tpu'"),
])
def test_bad_recipe_names_key_and_problem(changes, message):
    with pytest.raises(RecipeError) as error:
        parse_recipe(recipe(**changes), "bad.yaml")
    assert message in str(error.value)
    assert str(error.value).startswith("bad.yaml")


def test_yaml_is_loaded_safely_and_errors_name_the_file(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("name: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(str(path))
    with pytest.raises(RecipeError, match="does not exist"):
        load_recipe(str(tmp_path / "nope.yaml"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("fixed: [unclosed\n")
    with pytest.raises(RecipeError, match="broken.yaml: not valid YAML"):
        load_recipe(str(broken))


def test_sizes_file_relative_to_recipe(tmp_path):
    (tmp_path / "sizes.csv").write_text("set,m,n,k,a_t,b_t\nmine,8,4,2,0,0\n")
    path = tmp_path / "r.yaml"
    path.write_text(textwrap.dedent("""
        fixed: {framework: reference}
        mutable:
          operator: [{op: Gemm, from: sizes.csv, row: 0}]
    """))
    parsed = load_recipe(str(path))
    spec = parsed.configurations()[0]["operator"]
    assert spec.input_shapes == ((8, 2), (2, 4))
    assert spec.label == "Gemm m=8 n=4 k=2"


def test_shipped_quickstart_recipe_is_valid(repo_root):
    parsed = load_recipe(str(repo_root / "recipes" / "quickstart.yaml"))
    configurations = parsed.configurations()
    assert {str(c["framework"]) for c in configurations} == {
        "reference", "pytorch", "tensorflow", "cpp-relu", "cpp-softmax"}
    op_types = {c["operator"].op_type for c in configurations}
    assert op_types == {"Conv", "Gemm", "Relu", "Softmax"}
    assert all(c["operator"].source for c in configurations
               if c["operator"].op_type in ("Conv", "Gemm"))
