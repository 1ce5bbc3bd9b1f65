"""The training engine: graph tools, losses, penalties, learning rates and two trainers.

- :class:`FullTrainer`: the loss is part of the graph;
  onnxruntime's on-device training API computes loss, gradients and update.
- :class:`ForwardBackwardTrainer`:
  TrainingAgent runs forward and backward; small ONNX graphs compute the loss, its
  gradient, the penalty and the fused weight update.

``OrtGradientOptimizer`` and ``OrtGradientForwardBackwardOptimizer`` are the seed's
(onnxcustom's) classes with its parameters and conventions (:mod:`.seed`), subclasses of
these two.

The engine is five subpackages, each importing only those before it:

==============  =====================================================================
subpackage      its one job
==============  =====================================================================
``runtime``     the onnxruntime adapter: the build, devices, sessions, ``capi``
``graphs``      the user's model loaded and edited, the small graphs, the loss graph
``gradients``   gradient graphs: onnxruntime-training's builder, the portable rules
``steps``       one step object per trainer and backend, staged batches, buffers
``estimators``  the trainers: ``BaseTrainer``'s parts, ``FullTrainer``, ``ForwardBackwardTrainer``
==============  =====================================================================

The user's loss, penalty and learning-rate objects, the errors and the seed's API are
the modules beside them.
"""

from ..install import missing_runtime

try:  # ortbench's extras install a build; say which when none did
    import onnxruntime  # noqa: F401
except ModuleNotFoundError as e:
    if e.name != "onnxruntime":
        raise
    raise missing_runtime() from None

from .errors import ConvergenceError, NoGradientError, OrtBenchError
from .estimators.forward_backward import ForwardBackwardTrainer
from .estimators.full import FullTrainer
from .gradients.derivative import DerivativeOptions, onnx_derivative
from .graphs.loss_graph import add_loss_output
from .graphs.nodes import rewrite_linear_nodes
from .graphs.weights import onnx_rename_weights, trainable_initializers
from .learning_rates import (
    BaseLearningRate,
    LearningRateAdamW,
    LearningRateSGD,
    LearningRateSGDNesterov,
)
from .losses import (
    AbsoluteLearningLoss,
    BaseLearningLoss,
    ElasticLearningLoss,
    NegLogLearningLoss,
    SquareLearningLoss,
)
from .penalties import BaseLearningPenalty, ElasticLearningPenalty, NoLearningPenalty
from .seed import OrtGradientForwardBackwardOptimizer, OrtGradientOptimizer

__all__ = [
    "AbsoluteLearningLoss",
    "ConvergenceError",
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
    "NoGradientError",
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
