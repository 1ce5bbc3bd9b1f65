"""Forward/backward training: the model's forward and backward passes, then small ONNX
graphs for the loss, its gradient, the penalty and the fused weight update.

Two backends run the steps: ``'ort-training'`` a TrainingAgent over onnxruntime-training's
forward/backward graph (:mod:`ortbench.training.agent`) and ``'portable'`` a forward and a
gradient graph of standard operators (:mod:`ortbench.training.split`), on any onnxruntime
build. Both share the loss and update runs and the double-buffered weights
(:mod:`ortbench.training.loss_update`); every buffer a step touches is allocated and
bound before the first step.
"""

from __future__ import annotations

from .agent import AgentSteps
from .base import BaseTrainer
from .errors import OrtBenchError
from .graph_tools import bias_names
from .learning_rates import BaseLearningRate, LearningRateAdamW
from .losses import BaseLearningLoss, SquareLearningLoss
from .penalties import BaseLearningPenalty, NoLearningPenalty
from .split import SplitSteps


class ForwardBackwardTrainer(BaseTrainer):
    """Train an ONNX model with TrainingAgent's forward/backward and ONNX update graphs.

    Parameters follow scikit-learn's conventions: ``learning_loss`` (default
    :class:`SquareLearningLoss`), ``learning_penalty`` (default none) and
    ``learning_rate`` (default ``LearningRateSGD()``; ``LearningRateSGDNesterov`` for
    momentum) are estimator-like objects, tunable by GridSearchCV as
    ``learning_rate__eta0``.
    """

    def __init__(
        self,
        model_onnx=None,
        weights_to_train: list[str] | None = None,
        learning_loss: BaseLearningLoss | None = None,
        learning_penalty: BaseLearningPenalty | None = None,
        learning_rate: BaseLearningRate | None = None,
        batch_size: int = 10,
        max_iter: int = 100,
        device: str = "cpu",
        shuffle: bool = True,
        random_state=None,
        warm_start: bool = False,
        verbose: int = 0,
        validation_every: int = 1,
        intra_op_threads="auto",
        backend: str | None = None,
    ):
        self.model_onnx = model_onnx
        self.weights_to_train = weights_to_train
        self.learning_loss = learning_loss
        self.learning_penalty = learning_penalty
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.device = device
        self.shuffle = shuffle
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose
        self.validation_every = validation_every
        self.intra_op_threads = intra_op_threads
        self.backend = backend

    def _learning_loss(self) -> BaseLearningLoss:
        return self.learning_loss or SquareLearningLoss()

    def _penalty(self) -> BaseLearningPenalty:
        return self.learning_penalty or NoLearningPenalty()

    def _build(self) -> None:
        if isinstance(self.learning_rate_, LearningRateAdamW):
            raise OrtBenchError("LearningRateAdamW runs only in FullTrainer")
        static = self._static_batch(self._train_model)
        common = dict(
            weights=self.weights_,
            biases=bias_names(self._train_model, self.weights_),
            loss=self._learning_loss(),
            penalty=self._penalty(),
            rate=self.learning_rate_,
            sessions=self._sessions,
        )
        if self._backend == "portable":
            self._steps = SplitSteps(static, self._input.name, self.output_name_, **common)
        else:
            self._steps = AgentSteps(static, **common)


OrtGradientForwardBackwardOptimizer = ForwardBackwardTrainer
