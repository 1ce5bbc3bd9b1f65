"""The seed's API: ``OrtGradientOptimizer`` and ``OrtGradientForwardBackwardOptimizer``.

The onnxcustom tutorial ortbench grew from trained ONNX graphs with two classes. They are
here with the constructor parameters, defaults, repr and conventions its documents show,
as subclasses of :class:`FullTrainer` and :class:`ForwardBackwardTrainer`, which run the
steps. What the seed did differently from scikit-learn, these classes do as the seed did,
and only they (importing them from this module is the explicit choice):

- a float learning rate is ``LearningRateSGD(eta0=value, learning_rate='invscaling')``,
  a name is looked up by :meth:`BaseLearningRate.select`, and the schedule's ``t`` counts
  epochs, not samples;
- the squared error is the seed's, ``(p - y)^2`` with gradient ``2 (p - y)``: the
  forward/backward class's ``'square_error'`` is ``SquareLearningLoss(convention='seed')``
  and this module's :func:`add_loss_output` sums the loss over the batch, which
  ``OrtGradientOptimizer`` trains with the learning rate divided by the batch size;
- a fit that does not warm start draws the trained weights from a standard normal
  distribution (numpy's global generator, as the seed did);
- ``validation_every`` below 1 is a fraction of ``max_iter``; parameters are resolved
  when the object is created, and the repr lists every one of them;
- this module's ``LearningRateSGD`` and ``LearningRateSGDNesterov`` decay by
  ``'invscaling'`` by default, check their schedule when created and start
  ``'optimal'`` at ``eta0``; its ``SquareLearningLoss`` and ``NegLogLearningLoss`` have
  the seed's defaults. Names and floats given to the two classes select these.

The module also holds the seed's helpers its users call: ``OrtGradientForwardBackward``
(a model's forward and backward passes on demand), ``OrtDataLoader``, the named graphs of
``function_onnx_graph``, and its type and device look-ups.

``docs/seed_api.md`` lists the differences with :class:`FullTrainer` and
:class:`ForwardBackwardTrainer` side by side.
"""

from __future__ import annotations

from ..gradients.derivative import DerivativeOptions, onnx_derivative
from ..losses import AbsoluteLearningLoss, ElasticLearningLoss
from .behaviour import LOGGER
from .classes import OrtGradientForwardBackwardOptimizer, OrtGradientOptimizer
from .forward_backward import OrtGradientForwardBackward, OrtGradientForwardBackwardFunction
from .functions import function_onnx_graph, get_supported_functions, unreduced_onnx_loss
from .objects import (
    LearningRateSGD,
    LearningRateSGDNesterov,
    NegLogLearningLoss,
    SquareLearningLoss,
    add_loss_output,
)
from .utils import (
    OrtDataLoader,
    device_to_providers,
    dtype_to_var_type,
    get_onnx_opset,
    get_train_initializer,
    proto_type_to_dtype,
    rewrite_op_no_grad,
)

#: The seed's name of :func:`rewrite_op_no_grad` (a private name its users imported).
_rewrite_op_no_grad = rewrite_op_no_grad

__all__ = [
    "LOGGER",
    "DerivativeOptions",
    "onnx_derivative",
    "AbsoluteLearningLoss",
    "ElasticLearningLoss",
    "LearningRateSGD",
    "LearningRateSGDNesterov",
    "NegLogLearningLoss",
    "OrtGradientForwardBackward",
    "OrtGradientForwardBackwardFunction",
    "OrtGradientForwardBackwardOptimizer",
    "OrtDataLoader",
    "OrtGradientOptimizer",
    "SquareLearningLoss",
    "add_loss_output",
    "device_to_providers",
    "dtype_to_var_type",
    "function_onnx_graph",
    "get_onnx_opset",
    "get_supported_functions",
    "get_train_initializer",
    "proto_type_to_dtype",
    "rewrite_op_no_grad",
    "unreduced_onnx_loss",
]
