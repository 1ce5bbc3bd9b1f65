"""The training engine: graph tools, losses, penalties, learning rates and two trainers.

- :class:`FullTrainer` (alias ``OrtGradientOptimizer``): the loss is part of the graph;
  onnxruntime's on-device training API computes loss, gradients and update.
- :class:`ForwardBackwardTrainer` (alias ``OrtGradientForwardBackwardOptimizer``):
  TrainingAgent runs forward and backward; small ONNX graphs compute the loss, its
  gradient, the penalty and the fused weight update.
"""

from ..install import missing_runtime

try:  # ortbench's extras install a build; say which when none did
    import onnxruntime  # noqa: F401
except ModuleNotFoundError as e:
    if e.name != "onnxruntime":
        raise
    raise missing_runtime() from None

from .derivative import DerivativeOptions, onnx_derivative
from .errors import OrtBenchError
from .forward_backward import ForwardBackwardTrainer, OrtGradientForwardBackwardOptimizer
from .full import FullTrainer, OrtGradientOptimizer
from .graph_tools import onnx_rename_weights, rewrite_linear_nodes, trainable_initializers
from .learning_rates import (
    BaseLearningRate,
    LearningRateAdamW,
    LearningRateSGD,
    LearningRateSGDNesterov,
)
from .loss_graph import add_loss_output
from .losses import (
    AbsoluteLearningLoss,
    BaseLearningLoss,
    ElasticLearningLoss,
    NegLogLearningLoss,
    SquareLearningLoss,
)
from .penalties import BaseLearningPenalty, ElasticLearningPenalty, NoLearningPenalty

__all__ = [
    "AbsoluteLearningLoss",
    "BaseLearningLoss",
    "BaseLearningPenalty",
    "BaseLearningRate",
    "DerivativeOptions",
    "ElasticLearningLoss",
    "ElasticLearningPenalty",
    "ForwardBackwardTrainer",
    "FullTrainer",
    "LearningRateAdamW",
    "LearningRateSGD",
    "LearningRateSGDNesterov",
    "NegLogLearningLoss",
    "NoLearningPenalty",
    "OrtBenchError",
    "OrtGradientForwardBackwardOptimizer",
    "OrtGradientOptimizer",
    "SquareLearningLoss",
    "add_loss_output",
    "onnx_derivative",
    "onnx_rename_weights",
    "rewrite_linear_nodes",
    "trainable_initializers",
]
