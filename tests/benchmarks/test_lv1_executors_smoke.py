"""benchmarks/lv1_executors.py runs end to end: ``--smoke`` builds every executor and
native model, passes the agreement checks and prints every comparison table."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
pytest.importorskip("tensorflow")

TITLES = ("Inference: onnx.reference.ReferenceEvaluator vs d5ref",
          "Inference: onnx.reference.ReferenceEvaluator vs raw onnxruntime (ceiling for "
          "the d5ref target)",
          "Inference: raw onnxruntime.InferenceSession vs d5ort",
          "PyTorch: native torch.nn.Module vs d5pt.from_onnx",
          "TensorFlow eager: native Keras (eager) vs d5tf.from_onnx(mode='eager')",
          "TensorFlow function: native Keras in tf.function vs "
          "d5tf.from_onnx(mode='function')")


def floor_rows(out: str) -> list:
    """(model, batch) of each row of the floor table, read by columns, not by padding
    (the widths of the printed numbers vary from machine to machine)."""
    section = out.split("== Floor of an im2col executor", 1)[1].split("\n== ", 1)[0]
    table = section.split("\n\n", 1)[0]   # the breakdowns follow after a blank line
    lines = table.splitlines()[3:]  # title, explanation, header
    return [line.split()[:2] for line in lines if line.strip() and
            not line.startswith("Targets")]


@pytest.mark.slow
def test_smoke_run_prints_every_table(repo_root):
    script = repo_root / "benchmarks" / "lv1_executors.py"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    # The timeout only guards against a hang; the run takes ~30 s.
    result = subprocess.run([sys.executable, str(script), "--smoke"], cwd=repo_root,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for title in TITLES:
        assert f"== {title} ==" in out, out
    # one header and one row per model and pass in each table
    assert out.count("IQR of rounds") == len(TITLES)
    assert out.count("lenet          4 inference") == len(TITLES)
    assert out.count("transformer     4 inference") == 2   # d5ref and its ceiling
    assert out.count("resnet20       4 backprop") == 3
    assert "== Floor of an im2col executor" in out
    # a floor row per reference model: MLP, LeNet, the transformer (int64 tokens), ResNet-20
    assert floor_rows(out) == [["mlp", "4"], ["lenet", "4"], ["transformer", "4"],
                               ["resnet20", "4"]]
    for model in ("mlp", "lenet", "transformer", "resnet20"):
        assert f"-- where d5ref's time goes: {model} batch 4" in out
    assert out.count("interpreter (run minus operators)") == 4
    assert "Targets: " in out
