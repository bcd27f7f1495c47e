"""Bad recipes fail before any work starts, naming the key and the problem."""
import textwrap
import warnings

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


# -- every problem at once, each with its key path -------------------------------------

def test_every_problem_is_reported_at_once_with_its_key_path():
    raw = recipe(
        fixed={"dtype": "float13", "threads": 1},
        mutable={"framework": [["reference"], "pytorch"],
                 "operator": [{"op": "Softmax", "shape": [4, 5], "axis": "x"},
                              {"op": "Relu", "shape": [4, 5]}]},
        metrics={"WallclockTime": {"reruns": 5}, "L2Error": 5},
        acceptance=["L2Error.nosuchfield <= 1", "WallclockTime <= 1"])
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "bad.yaml")
    problems = error.value.problems
    # the type layer's problems first, then the components' (in the experiment's order),
    # then the thresholds'
    assert problems == [
        "metrics.L2Error: parameters must be a mapping (e.g. {reruns: 10}) or empty, got "
        "the number 5",
        "mutable.framework[0]: expected a framework name (a string), or a C++ kernel "
        "{cpp: SOURCE, op: ONNX_OPERATOR}, got a list ['reference']",
        "mutable.operator[0].axis: ONNX Softmax's attribute 'axis' is an integer (INT), "
        "got the string 'x'",
        "fixed.dtype: dtype must be float32 or float64, got the string 'float13'",
        "acceptance[0]: 'L2Error.nosuchfield <= 1': L2Error has no field 'nosuchfield'; "
        "it has ['absolute', 'per_output', 'relative'] (without a field, the threshold "
        "judges its main one)",
    ]
    text = str(error.value)
    assert text.startswith("bad.yaml: 5 problems (nothing was run):\n")
    assert all(f"  bad.yaml: {p}" in text for p in problems)


@pytest.mark.parametrize("changes, message", [
    ({"metrics": {"L2Error": 5}},
     "metrics.L2Error: parameters must be a mapping (e.g. {reruns: 10}) or empty, got "
     "the number 5"),
    ({"metrics": {"WallclockTime": {"reruns": "5"}}},
     "metrics.WallclockTime.reruns: expected an integer, got the string '5'"),
    ({"metrics": {"WallclockTime": {"reruns": float("inf")}}},
     "metrics.WallclockTime.reruns: expected an integer, got the number inf"),
    ({"mutable": {"framework": [["reference"]], "operator": [{"op": "Relu", "shape": [2]}]}},
     "mutable.framework[0]: expected a framework name (a string), or a C++ kernel "
     "{cpp: SOURCE, op: ONNX_OPERATOR}, got a list ['reference']"),
    ({"mutable": {"framework": ["reference"],
                  "operator": [{"op": "Softmax", "shape": [2, 3], "axis": "x"}]}},
     "mutable.operator[0].axis: ONNX Softmax's attribute 'axis' is an integer (INT), got "
     "the string 'x'"),
    ({"mutable": {"framework": ["reference"],
                  "operator": [{"op": "Conv", "inputs": [[1, 2, 5, 5], [3, 2, 3, 3]],
                                "attributes": {"pads": 1}}]}},
     "mutable.operator[0].attributes.pads: ONNX Conv's attribute 'pads' is a list of "
     "integers (INTS), got the number 1"),
    ({"mutable": {"framework": ["reference"],
                  "operator": [{"op": "Softmax", "shape": [2, 3], "axis": 5}]}},
     "mutable.operator[0]: Softmax 2x3 (axis=5): ONNX shape inference rejects this "
     "operator"),
    ({"mutable": {"framework": ["reference"],
                  "operator": [{"op": "Gemm", "inputs": [[2, 3], [4, 5]]}]}},
     "mutable.operator[0]: Gemm 2x3 × 4x5: ONNX shape inference rejects this operator"),
    ({"acceptance": ["L2Error.nosuchfield <= 1"]},
     "acceptance[0]: 'L2Error.nosuchfield <= 1': L2Error has no field 'nosuchfield'; it "
     "has ['absolute', 'per_output', 'relative']"),
    ({"acceptance": ["L2Error.relative <= nan"]}, "compares with NaN"),
    ({"mutable": {"framework": ["reference"],
                  "operator": [{"op": "Relu", "shape": [2**20, 2**20]}]}},
     "mutable.operator[0]: Relu 1048576x1048576: its inputs alone take 12288.0 GiB (in "
     "float32, plus the float64 copy the reference computes on), more than this machine's"),
    ({"fixed": {"threads": 10**30}}, "fixed.threads: expected a positive integer (at most "
                                     "2147483647), got the number 1000000000000"),
    ({"timeout": -1}, "timeout: seconds one configuration may take, a positive number; "
                      "got the number -1"),
    ({"timeout": float("nan")}, "timeout: seconds one configuration may take"),
    ({"fixed": {1: "x"}}, "fixed: component names are strings, got the number 1"),
    ({2: 3, "bogus": 1}, "unknown keys [2, 'bogus']"),
    ({"name": ["x"]}, "name: must be text, got a list ['x']"),
])
def test_mistyped_values_are_recipe_errors_with_key_paths(changes, message):
    raw = recipe(**{k: v for k, v in changes.items() if isinstance(k, str)})
    raw.update({k: v for k, v in changes.items() if not isinstance(k, str)})
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "bad.yaml")
    assert message in str(error.value)
    assert str(error.value).startswith("bad.yaml: ")


def test_problems_of_a_broken_section_do_not_cascade():
    """A section with the wrong type is one problem, not one per key that uses it."""
    with pytest.raises(RecipeError) as error:
        parse_recipe(recipe(metrics=7, mutable=[1]), "bad.yaml")
    assert error.value.problems == [
        "mutable: must be a mapping of component names to lists of alternatives, got a "
        "list [1]",
        "metrics: must be a mapping of metric names to parameters (or a list of metric "
        "names), got the number 7"]


def test_recipe_files_that_are_not_utf8_yaml_name_the_place(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\u00e9\nfixed: {framework: reference}\n".encode("latin-1"))
    with pytest.raises(RecipeError, match=r"latin1.yaml: line 1, column 10: byte 0xe9 is "
                                          r"not UTF-8 text; save the recipe as UTF-8"):
        load_recipe(str(path))
    deep = tmp_path / "deep.yaml"
    deep.write_text("# [[[[\nname: '[[[['\nfixed: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(RecipeError, match=r"^deep.yaml: line 3: brackets nested more "
                                          r"than 64 deep; a recipe needs a few levels$"):
        load_recipe(str(deep))
    deep.write_text("name: x\nfixed:\n" + "".join(f"{' ' * i}a{i}:\n"
                                                   for i in range(1, 600)) + " " * 600 + "1\n")
    with pytest.raises(RecipeError, match="deep.yaml: not valid YAML: nested too deeply"):
        load_recipe(str(deep))  # block nesting: PyYAML's own recursion limit
    twice = tmp_path / "twice.yaml"
    twice.write_text("fixed: {framework: reference}\nmetrics: {L2Error: {}}\n"
                     "metrics: {WallclockTime: {}}\n")
    with pytest.raises(RecipeError, match=r"(?s)twice.yaml: not valid YAML.*found key "
                                          r"'metrics' twice \(first 2:1\).*in "
                                          r"\"twice.yaml\", line 3, column 1"):
        load_recipe(str(twice))
    with pytest.raises(RecipeError, match="is not a file"):
        load_recipe(str(tmp_path))


def test_a_truncated_onnx_file_is_refused_at_load(tmp_path):
    import onnx
    from deep500.networks import create_model
    data = create_model("mlp", batch_size=2, input_shape=(1, 4, 4),
                        hidden=(8,)).SerializeToString()
    (tmp_path / "model.onnx").write_bytes(data[:len(data) // 2])
    (tmp_path / "nets.yaml").write_text(textwrap.dedent("""
        experiment: networks
        mutable:
          network: [{model: mlp}, {file: model.onnx}]
          executor: [reference]
    """))
    with pytest.raises(RecipeError) as error:
        load_recipe(str(tmp_path / "nets.yaml"))
    assert str(error.value).startswith(
        "nets.yaml: mutable.network[1].file: model.onnx is not a valid ONNX model (")
    (tmp_path / "model.onnx").write_bytes(data)
    assert load_recipe(str(tmp_path / "nets.yaml")).alternatives("network")[1].file
    assert onnx.load(str(tmp_path / "model.onnx"))  # the check leaves the file as it was


def test_metric_fields_are_the_summaries_keys(tmp_path):
    """``fields`` (what thresholds are checked against at load) is what each metric's
    summary holds."""
    import numpy as np
    import deep500 as d5
    from deep500.lv2_training.training_statistics import TrainingStatistics
    from deep500.lv2_training.trajectory import TrajectoryDivergence
    from deep500.lv2_training.trajectory_metric import TrajectoryDivergenceMetric
    x = [np.ones((2, 3))]
    measured = {
        d5.L1Error: d5.L1Error().measure(None, x, x),
        d5.L2Error: d5.L2Error().measure(None, x, x),
        d5.MaxError: d5.MaxError().measure(None, x, x),
        d5.FLOPs: d5.FLOPs(flops=10).measure(),
        d5.DiffHeatmap: d5.DiffHeatmap(str(tmp_path / "d.png")).measure(None, x, x),
        d5.OperatorTimes: d5.OperatorTimes().measure(),
        d5.FrameworkOverhead: d5.FrameworkOverhead().measure(),
        d5.PeakMemory: d5.PeakMemory().measure(),
    }
    heatmap = d5.VarHeatmap(str(tmp_path / "v.png"))
    heatmap.end(x), heatmap.end(x)
    measured[d5.VarHeatmap] = heatmap.measure(None, x, x)
    for cls in (d5.TestAccuracy, d5.LossCurve):
        measured[cls] = cls().measure(TrainingStatistics())
    # TrainingAccuracy's last four fields come with every=k (as WallclockTime's below)
    measured[d5.TrainingAccuracy] = d5.TrainingAccuracy(every=2).measure(TrainingStatistics())
    assert set(d5.TrainingAccuracy().measure(TrainingStatistics()).summary) < \
        set(d5.TrainingAccuracy.fields)
    measured[d5.TimeToAccuracy] = d5.TimeToAccuracy(0.5).measure(TrainingStatistics())
    for cls, result in measured.items():
        assert set(result.summary) == set(cls.fields), cls.__name__
    with warnings.catch_warnings():  # a few runs of nothing may have a wide CI
        warnings.simplefilter("ignore", d5.UnstableMeasurementWarning)
        fixed = d5.WallclockTime(reruns=3, warmup=0).time(lambda: None)
        adaptive = d5.WallclockTime(reruns=3, warmup=0, target_ci=0.99,
                                    max_time=1.0).time(lambda: None)
    assert set(fixed.summary) < set(adaptive.summary) == set(d5.WallclockTime.fields)
    summary = TrajectoryDivergence("a", "b", [], [], [], [], [], [], [], [], [], {}).summary()
    assert set(summary) == set(TrajectoryDivergenceMetric.fields)


# -- acceptance at run time: a threshold that cannot be judged keeps the measurement ----

def test_a_threshold_without_its_value_fails_and_keeps_the_measurement():
    from deep500.recipe.acceptance import Threshold
    from deep500.utils.metric import MetricResult
    result = MetricResult("L2Error", {"relative": 1e-7, "per_output": [1]}, "relative")
    assert Threshold("L2Error", None, "<=", 1e-4).check([result]) == {
        "threshold": "L2Error <= 0.0001", "value": 1e-7, "passed": True}
    missing = Threshold("L2Error", "nosuchfield", "<=", 1).check([result])
    assert missing == {"threshold": "L2Error.nosuchfield <= 1", "value": None,
                       "passed": False, "error": "L2Error has no field 'nosuchfield'; it "
                                                 "has ['per_output', 'relative']"}
    listed = Threshold("L2Error", "per_output", "<=", 1).check([result])
    assert listed["passed"] is False and listed["error"] == "L2Error.per_output is [1], " \
                                                            "not a number"
    nan = MetricResult("L2Error", {"relative": float("nan")}, "relative")
    assert Threshold("L2Error", None, ">=", 0).check([nan])["passed"] is False
    assert Threshold("MaxError", None, "<=", 1).check([result]) is None


def test_run_keeps_a_measurement_whose_threshold_names_a_missing_field(tmp_path,
                                                                       monkeypatch):
    """A metric that declares no ``fields`` is judged only at run time; a threshold on a
    field it does not produce fails there, and the record is written."""
    from deep500.recipe import components, run_recipe
    from deep500.results.files import read_results
    monkeypatch.setattr(components, "metric_fields", lambda name: None)
    path = tmp_path / "r.yaml"
    path.write_text(textwrap.dedent("""
        fixed: {framework: reference, threads: 1}
        mutable:
          operator: [{op: Relu, shape: [3, 4]}]
        metrics: {WallclockTime: {reruns: 2, warmup: 0}, L2Error: {}}
        acceptance: ["L2Error.nosuchfield <= 1", "L2Error.relative <= 1e-6"]
    """))
    summary = run_recipe(str(path), str(tmp_path / "out"), progress=False,
                         write_report=False)
    records = read_results(str(tmp_path / "out"))
    assert [r["kind"] for r in records] == ["measurement"]
    assert summary.acceptance_failures == 1 and summary.errors == 0
    first, second = records[0]["acceptance"]
    assert first["passed"] is False and "has no field 'nosuchfield'" in first["error"]
    assert second["passed"] is True


def test_training_recipes_check_dataset_options_and_default_to_training_metrics():
    raw = {"experiment": "training",
           "fixed": {"network": "mlp", "executor": "reference",
                     "optimizer": {"type": "sgd", "learning_rate": 0.1},
                     "dataset": {"name": "digits", "normalise": "standardize",
                                 "test_fraction": "half"}}}
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "t.yaml")
    assert error.value.problems == [
        "fixed.dataset: load_digits takes no ['normalise']; it takes ['input_node', "
        "'label_node', 'normalize', 'seed', 'test_fraction']",
        "fixed.dataset.test_fraction: expected a number, got the string 'half'"]
    raw["fixed"]["dataset"] = {"name": "digits", "normalize": "standardize"}
    raw["fixed"]["optimizer"]["learning_rate"] = "fast"
    with pytest.raises(RecipeError, match=r"^t.yaml: fixed.optimizer.learning_rate: "
                                          r"expected a finite number \(its default is "
                                          r"0.1\), got the string 'fast'$"):
        parse_recipe(raw, "t.yaml")
    raw["fixed"]["optimizer"]["learning_rate"] = 0.1
    assert list(parse_recipe(raw, "t.yaml").metric_params) == [
        "TrainingAccuracy", "TestAccuracy", "LossCurve"]


def test_deep_block_nesting_is_refused_whatever_the_recursion_limit(tmp_path):
    """torch.compile raises Python's recursion limit to 2000, where PyYAML reads 600
    levels of block nesting: the recipe is refused the same way."""
    import sys
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: x\nfixed:\n" + "".join(f"{' ' * i}a{i}:\n"
                                                   for i in range(1, 600)) + " " * 600 + "1\n")
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 5000))
    try:
        with pytest.raises(RecipeError, match="deep.yaml: not valid YAML: nested too deeply"):
            load_recipe(str(deep))
    finally:
        sys.setrecursionlimit(old)
