"""The seed's learning rates and losses, with its defaults, and its ``add_loss_output``
(a loss summed over the batch)."""

from __future__ import annotations

import numpy as np
import onnx

from .. import learning_rates, losses
from ..graphs import loss_graph
from ..graphs.loading import load_model
from ..graphs.nodes import unique_name
from ..learning_rates import BaseLearningRate
from ..losses import BaseLearningLoss


class _SeedSchedule:
    """The seed's schedules: ``'invscaling'`` by default, the name checked when the
    object is created, and ``'optimal'`` scaled so that its first rate is ``eta0``."""

    def _optimal(self, t: int) -> float:
        # Bottou's t0 as the seed chose it for its squared error, whose gradient at
        # prediction -typw and label 1 is 2 (1 + typw); the rate is then
        # eta0 * t0 / (t0 + t): eta0 at t = 0, slowly decreasing after.
        alpha = float(self.alpha)
        typw = np.sqrt(1.0 / np.sqrt(alpha))
        t0 = max(1.0, 2.0 * (1.0 + typw)) / (alpha * typw)
        return float(self.eta0) * t0 / (t0 + t)


class LearningRateSGD(_SeedSchedule, learning_rates.LearningRateSGD):
    """The seed's ``LearningRateSGD``: plain SGD, ``'invscaling'`` by default.

    Parameters
    ----------
    eta0 : float, default=0.01
        The first rate.
    alpha : float, default=0.0001
        The constant of ``'optimal'``.
    power_t : float, default=0.25
        The exponent of ``'invscaling'``: ``eta0 / (t + 1) ** power_t``.
    learning_rate : {'invscaling', 'constant', 'optimal'}, default='invscaling'
        The schedule; ``'optimal'`` is ``eta0 * t0 / (t0 + t)``, ``t0`` being Bottou's
        heuristic for ``alpha``. ``t`` counts epochs.

    Raises
    ------
    OrtBenchError
        For an unknown schedule or a bad value (a ``ValueError``, as the seed raised).
    """

    def __init__(
        self,
        eta0: float = 0.01,
        alpha: float = 0.0001,
        power_t: float = 0.25,
        learning_rate: str = "invscaling",
    ):
        super().__init__(eta0=eta0, alpha=alpha, power_t=power_t, learning_rate=learning_rate)
        self.check()


class LearningRateSGDNesterov(_SeedSchedule, learning_rates.LearningRateSGDNesterov):
    """The seed's ``LearningRateSGDNesterov``: momentum, ``'invscaling'`` by default.

    Parameters
    ----------
    eta0, alpha, power_t, learning_rate
        As :class:`LearningRateSGD`.
    momentum : float, default=0.9
        In [0, 1).
    nesterov : bool, default=True
        Nesterov's momentum, else classical momentum.

    Raises
    ------
    OrtBenchError
        For an unknown schedule or a bad value.
    """

    def __init__(
        self,
        eta0: float = 0.01,
        alpha: float = 0.0001,
        power_t: float = 0.25,
        learning_rate: str = "invscaling",
        momentum: float = 0.9,
        nesterov: bool = True,
    ):
        super().__init__(
            eta0=eta0,
            alpha=alpha,
            power_t=power_t,
            learning_rate=learning_rate,
            momentum=momentum,
            nesterov=nesterov,
        )
        self.check()


class SquareLearningLoss(losses.SquareLearningLoss):
    """The seed's squared error: ``(p - y)^2``, gradient ``2 (p - y)`` by default.

    Parameters
    ----------
    convention : {'seed', 'sklearn'}, default='seed'
        As :class:`ortbench.training.SquareLearningLoss`.
    """

    def __init__(self, convention: str = "seed"):
        super().__init__(convention=convention)


class NegLogLearningLoss(losses.NegLogLearningLoss):
    """The seed's log loss: ``eps`` 1e-5 by default (ortbench's is float32's epsilon).

    Parameters
    ----------
    eps : float, default=1e-5
        Probabilities are clipped to [eps, 1 - eps].
    probability_function : str, default='sigmoid'
        As :class:`ortbench.training.NegLogLearningLoss`.
    """

    def __init__(self, eps: float = 1e-5, probability_function: str = "sigmoid"):
        super().__init__(eps=eps, probability_function=probability_function)


def add_loss_output(
    onx,
    score_name: str = "squared_error",
    loss_name: str = "loss",
    label_name: str = "label",
    weight_name: str | None = None,
    penalty: dict | None = None,
    output_index: int | str | None = None,
    **kwargs,
) -> onnx.ModelProto:
    """The seed's ``add_loss_output``: a loss summed over the batch, shaped (1, 1).

    It is :func:`ortbench.training.add_loss_output` with ``convention='seed'``; the
    parameters are the seed's, ``kwargs`` its ``l1_weight`` and ``l2_weight``.

    Parameters
    ----------
    onx : onnx.ModelProto
        The model.
    score_name : str
        ``'squared_error'`` or ``'l2'``, ``'absolute_error'`` or ``'l1'``, ``'elastic'``,
        ``'log'``.
    loss_name, label_name : str
        The new output and the new label input.
    weight_name : str, optional
        A sample-weight input (n,) multiplying each row's loss.
    penalty : dict, optional
        ``{'coef': {'l1': a, 'l2': b}}`` or ``{'coef': b}`` (an L2 weight).
    output_index : int or str, optional
        The output compared with the labels, by position or name.
    **kwargs
        ``l1_weight``, ``l2_weight`` of the elastic loss.

    Returns
    -------
    onnx.ModelProto

    Raises
    ------
    OrtBenchError
        As :func:`ortbench.training.add_loss_output`.

    Notes
    -----
    As the seed did, a tensor of the model named ``label_name`` (a classifier's ``label``
    output) is renamed ``_label_`` (``_<label_name>_``) to free the name for the labels.
    ``'log'`` is the seed's binary log loss (int64 labels, see ``convention='seed'`` in
    :func:`ortbench.training.add_loss_output`).
    """
    model = _free_name(load_model(onx), label_name)
    return loss_graph.add_loss_output(
        model,
        score_name=score_name,
        loss_name=loss_name,
        label_name=label_name,
        weight_name=weight_name,
        penalty=penalty,
        output_index=output_index,
        convention="seed",
        **kwargs,
    )


def _free_name(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """``model``, or a copy of it where the tensor ``name`` is renamed ``_<name>_``."""
    if name not in loss_graph.tensor_names(model.graph):
        return model
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    new = unique_name(loss_graph.tensor_names(renamed.graph), f"_{name}_")
    for node in renamed.graph.node:
        node.input[:] = [new if i == name else i for i in node.input]
        node.output[:] = [new if o == name else o for o in node.output]
    for value in [*renamed.graph.output, *renamed.graph.value_info, *renamed.graph.input]:
        if value.name == name:
            value.name = new
    for init in renamed.graph.initializer:
        if init.name == name:
            init.name = new
    return renamed


def _seed_loss(loss) -> BaseLearningLoss:
    """The seed's loss for a name: this module's squared error and log loss, whose
    defaults are the seed's; an object is kept as given."""
    chosen = BaseLearningLoss.select(loss)
    if chosen is loss:
        return chosen
    seed_class = {
        losses.SquareLearningLoss: SquareLearningLoss,
        losses.NegLogLearningLoss: NegLogLearningLoss,
    }.get(type(chosen))
    return chosen if seed_class is None else seed_class()


def _seed_rate(value) -> BaseLearningRate:
    """The seed's learning rate for a float or a name: this module's classes, whose
    schedules are the seed's; an object is kept as given."""
    chosen = BaseLearningRate.select(value)
    if chosen is value:
        return chosen
    seed_class = {
        learning_rates.LearningRateSGD: LearningRateSGD,
        learning_rates.LearningRateSGDNesterov: LearningRateSGDNesterov,
    }[type(chosen)]
    return seed_class(**chosen.get_params())
