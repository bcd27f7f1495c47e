"""The reference framework (``d5ref``): slow, readable NumPy implementations that every
framework's version is validated against."""
from deep500.frameworks.reference.custom_ops import custom_op
from deep500.frameworks.reference.distributed import (
    SCHEMES, ConsistentDecentralized, ConsistentNeighbors, ConsistentParameterServer,
    CppConsistentDecentralized, InconsistentParameterServer, ModelAverageDecentralized,
    SparseTopKDecentralized, StaleSynchronous)
from deep500.frameworks.reference.executor import ReferenceGraphExecutor, from_onnx
from deep500.frameworks.reference.network import ReferenceNetwork
from deep500.frameworks.reference.operators import (ReferenceOp, create_operator,
                                                    get_operator_class, operator_names,
                                                    register)
from deep500.frameworks.reference.optimizers import (AcceleGradOptimizer, AdaGradOptimizer,
                                                    AdamOptimizer, GradientDescent,
                                                    MomentumOptimizer, RMSPropOptimizer)
from deep500.frameworks.reference.visitor import ReferenceVisitor

__all__ = ["SCHEMES", "ConsistentDecentralized", "ConsistentNeighbors",
           "ConsistentParameterServer", "InconsistentParameterServer",
           "ModelAverageDecentralized", "StaleSynchronous", "CppConsistentDecentralized",
           "SparseTopKDecentralized", "AcceleGradOptimizer",
           "AdaGradOptimizer", "AdamOptimizer", "GradientDescent",
           "MomentumOptimizer", "RMSPropOptimizer", "ReferenceGraphExecutor", "ReferenceNetwork", "ReferenceOp", "ReferenceVisitor",
           "create_operator", "custom_op", "from_onnx", "get_operator_class", "operator_names",
           "register"]
