"""A distributed recipe run without ``--np`` says on the console that it runs on 1 rank
and how to run more (issue 31, item 7: it trained on 1 rank without a word)."""
import pytest
import yaml

from deep500.recipe import parse_recipe
from deep500.recipe.single_rank_notice import single_rank_notice

DISTRIBUTED = {"name": "tiny_distributed", "experiment": "distributed",
               "fixed": {"network": {"model": "mlp", "hidden": [8]},
                         "optimizer": {"type": "sgd", "learning_rate": 0.1},
                         "dataset": {"name": "digits"}, "epochs": 2, "batch_size": 64,
                         "scheme": "ConsistentDecentralized", "threads": 1},
               "metrics": {"TestAccuracy": {}}}


def test_the_notice_is_for_distributed_recipes_that_name_no_ranks():
    notice = single_rank_notice(parse_recipe(DISTRIBUTED, "tiny.yaml"))
    assert "tiny.yaml is a distributed recipe; it runs on 1 rank" in notice
    assert "deep500 run --np N tiny.yaml" in notice
    with_ranks = {**DISTRIBUTED, "mutable": {"ranks": [1, 2]}}
    assert single_rank_notice(parse_recipe(with_ranks, "grid.yaml")) is None
    operators = {"experiment": "operators", "fixed": {"framework": "reference"},
                 "mutable": {"operator": [{"op": "Relu", "shape": [2]}]}}
    assert single_rank_notice(parse_recipe(operators, "ops.yaml")) is None



def test_deep500_run_without_np_prints_the_notice_before_running(tmp_path, capsys,
                                                                monkeypatch):
    import deep500.recipe
    from deep500.cli import main
    class Ran(Exception):
        """Raised where the run would start: what was printed before is checked."""

    def run_recipe(path, *args, **kwargs):
        raise Ran(path)

    monkeypatch.setattr(deep500.recipe, "run_recipe", run_recipe)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny_distributed.yaml").write_text(yaml.safe_dump(DISTRIBUTED))
    with pytest.raises(Ran, match="tiny_distributed.yaml"):
        main(["run", "tiny_distributed.yaml", "--out", "out", "--db", "d5.db"])
    stderr = capsys.readouterr().err
    assert "deep500: tiny_distributed.yaml is a distributed recipe; it runs on 1 rank" \
        in stderr
    assert "'deep500 run --np N tiny_distributed.yaml'" in stderr
