"""Experiment kinds a recipe can name (``experiment: <name>``)."""
from deep500.recipe.experiments.datasets import DatasetsExperiment
from deep500.recipe.experiments.distributed import DistributedExperiment
from deep500.recipe.experiments.models import ModelsExperiment
from deep500.recipe.experiments.networks import NetworksExperiment
from deep500.recipe.experiments.operators import OperatorsExperiment
from deep500.recipe.experiments.parallelism import ParallelismExperiment
from deep500.recipe.experiments.training import TrainingExperiment

EXPERIMENTS = {e.name: e for e in (OperatorsExperiment(), NetworksExperiment(),
                                   TrainingExperiment(), DistributedExperiment(),
                                   ModelsExperiment(), ParallelismExperiment(),
                                   DatasetsExperiment())}

__all__ = ["EXPERIMENTS"]
