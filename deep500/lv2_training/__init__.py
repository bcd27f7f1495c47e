"""Level 2: datasets, samplers, optimizers and training (interfaces, metrics and
validation; reference optimizers live in ``deep500.frameworks.reference.optimizers``,
dataset loaders in ``deep500.datasets``)."""
from deep500.lv2_training.bucket_sampler import BucketSampler
from deep500.lv2_training.dataset import Dataset, NumpyDataset
from deep500.lv2_training.dataset_types import FileListDataset, SyntheticDataset
from deep500.lv2_training.events import StopTraining, TrainingEvent
from deep500.lv2_training.gradient_modifiers import GradientClipping, WeightDecay
from deep500.lv2_training.optimizer import (Optimizer, OptimizerEvent, ThreeStepOptimizer,
                                            UpdateRuleOptimizer)
from deep500.lv2_training.optimizer_validation import test_optimizer
from deep500.lv2_training.sampler import (ChoiceSampler, OrderedSampler, Sampler,
                                          SamplerEvent, ShuffleSampler)
from deep500.lv2_training.sampler_metrics import DatasetBias, DatasetLatency
from deep500.lv2_training.sampler_validation import test_sampler
from deep500.lv2_training.schedules import (Constant, CosineAnnealing, ExponentialDecay,
                                            LearningRateSchedule, LinearWarmup,
                                            MultiStepDecay, Schedule, StepDecay)
from deep500.lv2_training.trainer import Trainer
from deep500.lv2_training.training_events import (Checkpoint, CSVWriter, JSONWriter,
                                                  ProgressBar, StopAtAccuracy, TimeLimit,
                                                  read_json_lines)
from deep500.lv2_training.training_metrics import (LossCurve, TestAccuracy,
                                                   TimeToAccuracy, TrainingAccuracy,
                                                   TrainingMetric)
from deep500.lv2_training.training_statistics import EpochStatistics, TrainingStatistics
from deep500.lv2_training.training_validation import test_training
from deep500.lv2_training.trajectory import TrajectoryDivergence, trajectory_divergence
from deep500.lv2_training.transformations import (Cutout, Normalize, RandomCrop,
                                                  RandomHorizontalFlip, Transformation)

__all__ = [
    "BucketSampler", "CSVWriter", "Checkpoint", "ChoiceSampler", "Constant",
    "CosineAnnealing", "Cutout",
    "Dataset", "DatasetBias", "DatasetLatency", "EpochStatistics", "ExponentialDecay",
    "FileListDataset", "GradientClipping", "JSONWriter", "LearningRateSchedule",
    "LinearWarmup", "LossCurve", "MultiStepDecay", "Normalize", "NumpyDataset",
    "Optimizer", "OptimizerEvent", "OrderedSampler", "ProgressBar", "RandomCrop",
    "RandomHorizontalFlip", "Sampler", "SamplerEvent", "Schedule", "ShuffleSampler",
    "StepDecay", "StopAtAccuracy", "StopTraining", "SyntheticDataset", "TestAccuracy",
    "ThreeStepOptimizer", "TimeLimit", "TimeToAccuracy", "Trainer", "TrainingAccuracy",
    "TrainingEvent", "TrainingMetric", "TrainingStatistics", "Transformation",
    "UpdateRuleOptimizer", "WeightDecay", "read_json_lines", "test_optimizer",
    "test_sampler", "test_training", "TrajectoryDivergence", "trajectory_divergence",
]
