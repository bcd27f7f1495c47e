"""Pipeline (model) parallelism as a Level-3 scheme: the graph cut into contiguous
stages (``stage_split``), the schedules (``schedule``: GPipe, 1F1B), the transfers
between stages (``transfer``), per-node times for a balanced split (``node_times``),
the modelled step and bubble (``step_model``) and the scheme itself
(``PipelineParallel``, hybrid with data parallelism over groups of pipelines)."""
from deep500.lv3_distributed.pipeline.pipeline_parallel import (PipelineParallel,
                                                                microbatch_bounds)
from deep500.lv3_distributed.pipeline.schedule import SCHEDULES
from deep500.lv3_distributed.pipeline.stage_split import GraphCuts, balanced_cuts
from deep500.lv3_distributed.pipeline.step_model import (PipelineStepPrediction,
                                                         gpipe_bubble,
                                                         predict_pipeline_step)

__all__ = ["PipelineParallel", "microbatch_bounds", "SCHEDULES", "GraphCuts",
           "balanced_cuts", "PipelineStepPrediction", "gpipe_bubble",
           "predict_pipeline_step"]
