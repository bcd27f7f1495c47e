"""deep500 history --run A..B and deep500 bisect on a throwaway git repository whose
third commit makes a C++ operator sleep (issue 31, item 5)."""
import os
import subprocess
import textwrap

import pytest

from deep500.cli import main
from deep500.store.history import history_points

RECIPE = textwrap.dedent("""
    name: revisiontiny
    fixed: {dtype: float32, threads: 1, seed: 0}
    mutable:
      framework: [{cpp: kernels/relu.cpp, op: Relu}]
      operator: [{op: Relu, shape: [8, 16]}]
    metrics:
      WallclockTime: {reruns: 6, warmup: 1}
""")

KERNEL = textwrap.dedent("""
    #include <deep500/deep500.h>
    #include <chrono>
    #include <thread>

    template <typename T>
    class Relu : public deep500::CustomOperator {
     public:
        explicit Relu(int64_t size) : size_(size) {}
        void forward(const T* x, T* y) {
            SLOW
            for (int64_t i = 0; i < size_; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
        }
        void backward(const T* dy, const T* x, const T*, T* dx) {
            for (int64_t i = 0; i < size_; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
        }
     private:
        int64_t size_;
    };

    D500_EXPORTED void* create_new_op(deep500::tensor_t* inputs, int, deep500::tensor_t*,
                                      int) {
        return new Relu<DTYPE>(deep500::num_elements(inputs[0]));
    }

    D500_REGISTER_OP(Relu<DTYPE>);
""")
SLEEP = "std::this_thread::sleep_for(std::chrono::milliseconds(3));"


def _git(repo, *args):
    environment = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                   "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=environment, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    """Four commits: fast, a README, the kernel sleeps 3 ms per call, a README."""
    repo = tmp_path_factory.mktemp("project")
    _git(repo, "init", "-q", "-b", "main")
    (repo / "kernels").mkdir()
    (repo / "bench.yaml").write_text(RECIPE)
    shas = []
    for number, (kernel, readme) in enumerate([("", "fast"), ("", "docs"),
                                               (SLEEP, "docs"), (SLEEP, "more docs")]):
        (repo / "kernels" / "relu.cpp").write_text(KERNEL.replace("SLOW", kernel))
        (repo / "README").write_text(readme)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"commit {number}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


@pytest.mark.slow
def test_history_run_and_bisect(repository, tmp_path, capsys, monkeypatch):
    """Three runs in all (some 4 s of CPU each): commits 2 and 3 by history --run, then
    commit 1 by bisect, which finds the rest stored."""
    repo, shas = repository
    monkeypatch.chdir(tmp_path)  # the run folders go under results/revisions/ here
    database = str(tmp_path / "d.db")
    recipe = str(repo / "bench.yaml")
    assert main(["history", "--run", f"{shas[1]}..{shas[3]}", recipe, "--db",
                 database]) == 0
    output = capsys.readouterr().out
    assert "caveat: each revision runs in a temporary git worktree" in output
    assert f"2 revision(s) of {repo}" in output and f"{shas[2][:7]} commit 2" in output
    assert "see them with deep500 history --all" in output
    assert [p["revision"] for p in history_points(database, "operator=Relu")["points"]] \
        == shas[2:]
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # removed again

    # bisect runs only commit 1: commits 2 and 3 are stored already
    status = main(["bisect", recipe, "--good", shas[1], "--bad", shas[3], "--config",
                   "operator=Relu", "--db", database])
    output = capsys.readouterr().out
    assert status == 0, output
    assert output.count("running ...") == 1 and output.count("already stored") == 2
    assert f"first slow commit: {shas[2]} commit 2" in output
    assert len(_git(repo, "worktree", "list").splitlines()) == 1

    points = history_points(database, "operator=Relu")["points"]
    assert [p["revision"] for p in points] == [shas[2], shas[3], shas[1]]  # as run
    assert points[2]["value"] < 1e-3 < 3e-3 < min(points[0]["value"], points[1]["value"])

    # both slow: nothing to bisect (microseconds on a loaded machine vary by 2x, hence a
    # threshold above that noise); everything is reused
    assert main(["bisect", recipe, "--good", shas[2], "--bad", shas[3], "--config",
                 "operator=Relu", "--db", database, "--threshold", "300%"]) == 1
    output = capsys.readouterr().out
    assert "running ..." not in output and "nothing to bisect" in output

    assert main(["history", "--run", f"{shas[3]}..{shas[3]}", recipe, "--db",
                 database]) == 2
    assert "the range holds no commit" in capsys.readouterr().err
    assert main(["bisect", recipe, "--good", shas[3], "--bad", shas[0], "--config",
                 "operator=Relu", "--db", database]) == 2
    assert "does not descend from" in capsys.readouterr().err
