"""Forward/backward training: the model's forward and backward passes, then small ONNX
graphs for the loss, its gradient, the penalty and the fused weight update.

Two backends run the steps: ``'ort-training'`` a TrainingAgent over onnxruntime-training's
forward/backward graph (:mod:`ortbench.training.steps.agent`) and ``'portable'`` a forward and a
gradient graph of standard operators (:mod:`ortbench.training.steps.split`), on any onnxruntime
build. Both share the loss and update runs and the double-buffered weights
(:mod:`ortbench.training.steps.loss_update`); every buffer a step touches is allocated and
bound before the first step.
"""

from __future__ import annotations

from ..errors import OrtBenchError
from ..graphs.weights import bias_names
from ..learning_rates import BaseLearningRate, LearningRateAdamW
from ..losses import BaseLearningLoss
from ..penalties import BaseLearningPenalty, NoLearningPenalty
from ..steps.agent import AgentSteps
from ..steps.split import SplitSteps
from .base import BaseTrainer
from .docstrings import shared_docstring


@shared_docstring
class ForwardBackwardTrainer(BaseTrainer):
    """Train an ONNX model by its forward and backward passes and small ONNX graphs.

    A step runs the model forward, a loss graph (loss and its gradient), the model
    backward and one update graph of every weight with the penalty folded in. Forward
    and backward run on TrainingAgent (``backend='ort-training'``) or as two graphs of
    standard operators (``backend='portable'``). Loss, penalty and learning rate are
    estimator-like objects, tunable by GridSearchCV as ``learning_rate__eta0``.

    Parameters
    ----------
    {model_parameters}
    learning_loss : BaseLearningLoss, optional
        By default ``NegLogLearningLoss()`` for a classifier graph (trained through the
        raw scores behind its Sigmoid or Softmax) and ``SquareLearningLoss()`` otherwise.
    learning_penalty : BaseLearningPenalty, optional
        No penalty by default.
    learning_rate : BaseLearningRate, optional
        ``LearningRateSGD()`` by default; ``LearningRateSGDNesterov`` for momentum.
    {fit_parameters}
    backend : {'ort-training', 'portable'}, optional
        What runs forward and backward: ort-training where it is installed, else
        portable.

    Attributes
    ----------
    {attributes}

    Raises
    ------
    OrtBenchError
        From :meth:`fit`, for bad input, ``LearningRateAdamW``, a model whose backward
        pass needs more than its output from the forward pass (ort-training), or a
        diverging loss.
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
        self._keep_params(locals())

    def _learning_loss(self) -> BaseLearningLoss | None:
        loss = self.learning_loss
        if loss is not None and not isinstance(loss, BaseLearningLoss):
            raise OrtBenchError(
                f"learning_loss must be a BaseLearningLoss object such as "
                f"NegLogLearningLoss(), got {type(loss).__name__} {loss!r}"
            )
        if loss is not None:
            loss.check()
        return loss

    def _penalty(self) -> BaseLearningPenalty:
        penalty = self.learning_penalty
        if penalty is not None and not isinstance(penalty, BaseLearningPenalty):
            raise OrtBenchError(
                f"learning_penalty must be a BaseLearningPenalty object such as "
                f"ElasticLearningPenalty(l1=0, l2=1e-4), got {type(penalty).__name__} {penalty!r}"
            )
        penalty = penalty or NoLearningPenalty()
        penalty.check()
        return penalty

    def _steps_class(self) -> type[SplitSteps | AgentSteps]:
        return SplitSteps if self._backend == "portable" else AgentSteps

    def _build(self) -> None:
        if isinstance(self.learning_rate_, LearningRateAdamW):
            raise OrtBenchError("LearningRateAdamW runs only in FullTrainer")
        static = self._static_batch(self._train_model)
        self._steps = self._steps_class()(
            static,
            self.weights_,
            bias_names(self._train_model, self.weights_),
            self.learning_loss_,
            self._penalty(),
            self.learning_rate_,
            self._sessions,
        )
