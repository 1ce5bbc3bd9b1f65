"""The estimator both trainers share: :class:`BaseTrainer`, its parts put together.

A trainer subclass prepares its model and chooses its step object
(:meth:`BaseTrainer._build`, see :mod:`ortbench.training.steps`), which builds the graphs,
binds them over the staged batches and runs the epochs. Everything else is one part each:

- :mod:`.params`: hyper-parameters, trained weights and pickling;
- :mod:`.fit_loop`: the epochs, the learning-rate schedule, divergence, warm starts;
- :mod:`.preparation`: the model and the data made ready for a fit;
- :mod:`.prediction`: predict, score, losses and export.
"""

from __future__ import annotations

from sklearn.base import clone
from sklearn.utils import ClassifierTags, RegressorTags, Tags

from ...errors import OrtBenchError
from ..losses import BaseLearningLoss
from ..steps.protocol import Steps
from .fit_loop import FitLoop
from .params import TrainerParams
from .prediction import PredictionExport
from .preparation import ModelPreparation


class BaseTrainer(FitLoop, ModelPreparation, PredictionExport, TrainerParams):
    """Shared estimator API: fit, predict, score, state and export."""

    #: The step object of the last build (see :mod:`ortbench.training.steps.protocol`).
    _steps: Steps

    def __sklearn_tags__(self) -> Tags:
        """scikit-learn's tags: a classifier for a classifier graph trained on a
        classification loss, a regressor for another model.

        ``is_classifier`` reads them, and through it ``cross_validate`` and
        ``GridSearchCV``, which then split a classifier's rows into stratified folds.
        Before a fit they come from the model as :meth:`fit` would prepare it; a model
        or parameter :meth:`fit` would refuse leaves the type unset.
        """
        tags = super().__sklearn_tags__()
        classifier = self._classifies()
        if classifier is True:
            tags.estimator_type, tags.classifier_tags = "classifier", ClassifierTags()
        elif classifier is False:
            tags.estimator_type, tags.regressor_tags = "regressor", RegressorTags()
        return tags

    def _classifies(self) -> bool | None:
        """True for a classifier, False for a regressor, None when the model or the
        parameters cannot be prepared."""
        fitted = getattr(self, "is_classifier_", None)
        if fitted is not None:
            return fitted
        probe = clone(self)
        try:
            probe._check_params()
            probe._prepare_model()
        except (OrtBenchError, ValueError, TypeError, OSError):
            return None  # fit says what is wrong
        return probe.is_classifier_

    def _learning_loss(self) -> BaseLearningLoss | None:
        """The loss the user chose (checked), or None for the default: the log loss for a
        classifier graph, the squared error otherwise."""
        raise NotImplementedError

    def _steps_class(self) -> type[Steps]:
        """The class of the step object this trainer runs on its backend."""
        raise NotImplementedError

    def _build(self) -> None:
        """Build the graphs and the step object ``self._steps`` from ``self.model_``."""
        raise NotImplementedError
