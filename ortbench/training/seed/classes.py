"""The seed's two classes, ``OrtGradientOptimizer`` and
``OrtGradientForwardBackwardOptimizer``: the seed's parameters on the engine's trainers."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime

from ..errors import NotSupportedError, OrtBenchError
from ..estimators.forward_backward import ForwardBackwardTrainer
from ..estimators.full import FullTrainer
from ..gradients.derivative import DerivativeOptions, onnx_derivative
from ..graphs.loading import load_model
from ..graphs.nodes import rewrite_linear_nodes
from ..graphs.outputs import select_outputs
from ..graphs.weights import check_weight_names
from ..losses import BaseLearningLoss
from .behaviour import _as_seed_stored, _SeedBehaviour
from .objects import SquareLearningLoss


class OrtGradientOptimizer(_SeedBehaviour, FullTrainer):
    """The seed's full-training class: the model outputs its loss; onnxruntime computes
    the gradient and updates the weights.

    Parameters
    ----------
    model_onnx : onnx.ModelProto
        A model with a loss output, as :func:`add_loss_output` makes it.
    weights_to_train : list of str
        The initializers to train.
    loss_output_name : str
        The loss output.
    max_iter : int
        Epochs.
    training_optimizer_name : str
        ``'SGDOptimizer'``, the only optimizer the seed had.
    batch_size : int
        Rows per step.
    learning_rate : float, str or BaseLearningRate
        See :meth:`BaseLearningRate.select`; a float is ``LearningRateSGD(eta0=value,
        learning_rate='invscaling')``. The optimizer steps with the rate divided by
        ``batch_size`` and ``train_losses_`` holds the loss divided by it, the seed's
        convention for a loss summed over the batch.
    device : str
        ``'cpu'`` or ``'cuda'``.
    warm_start : bool
        Continue from the previous fit's weights; otherwise draw them anew.
    verbose : int
        Print one progress line per epoch.
    validation_every : int or float
        Score the validation data every that many epochs, or that fraction of max_iter.
    saved_gradient : str, optional
        A file name: the first fit writes the gradient graph of the loss there, and the
        training graph onnxruntime runs to ``saved_gradient + '.training.onnx'``.
    sample_weight_name : str
        The model's sample-weight input; ``fit(sample_weight=...)`` needs it.
    """

    exc = True
    enable_logging = False
    _summed_loss = True

    def __init__(
        self,
        model_onnx,
        weights_to_train,
        loss_output_name="loss",
        max_iter=100,
        training_optimizer_name="SGDOptimizer",
        batch_size=10,
        learning_rate="SGD",
        device="cpu",
        warm_start=False,
        verbose=0,
        validation_every=0.1,
        saved_gradient=None,
        sample_weight_name="weight",
    ):
        self._keep_params(_as_seed_stored(locals()))
        if self.learning_rate.n_states:
            raise NotSupportedError(
                f"OrtGradientOptimizer trains with plain SGD only, got "
                f"{type(self.learning_rate).__name__}: use "
                f"OrtGradientForwardBackwardOptimizer for momentum"
            )

    def _learning_loss(self) -> BaseLearningLoss:
        return SquareLearningLoss()

    def fit(
        self,
        X,
        y,
        sample_weight=None,
        X_val=None,
        y_val=None,
        use_numpy=False,
        sample_weight_val=None,
    ):
        """Train on (X, y), from weights drawn anew unless ``warm_start``.

        Parameters
        ----------
        X, y, sample_weight, X_val, y_val, sample_weight_val
            As for :meth:`FullTrainer.fit`; ``sample_weight`` is fed to the model's input
            ``sample_weight_name``.
        use_numpy : bool
            Kept for the seed's signature, where it chose numpy or onnxruntime for
            copying batches: ortbench feeds onnxruntime the same way either way.

        Returns
        -------
        self

        Raises
        ------
        OrtBenchError
            When ``sample_weight`` is given and the model has no input
            ``sample_weight_name``, and as :meth:`FullTrainer.fit`.
        """
        if sample_weight is not None:
            inputs = [i.name for i in load_model(self.model_onnx).graph.input]
            if self.sample_weight_name not in inputs:
                raise OrtBenchError(
                    f"sample_weight needs a model input named {self.sample_weight_name!r} "
                    f"(sample_weight_name): add one with add_loss_output(..., weight_name=...)"
                )
        return super().fit(X, y, sample_weight, X_val, y_val, sample_weight_val)

    def _check_labels(self, y: np.ndarray, fitted_classes: bool) -> np.ndarray:
        """Integer class labels (n,) or (n, 1) where the model's loss reads int64 labels
        (the seed's log loss); otherwise as :class:`FullTrainer`."""
        data = [i for i in self.model_.graph.input if i.name not in self.weights_]
        labels = [i for i in data if i.name != self._input.name][:1]
        if not labels or labels[0].type.tensor_type.elem_type != onnx.TensorProto.INT64:
            return super()._check_labels(y, fitted_classes)
        if not np.issubdtype(y.dtype, np.integer) or y.ndim not in (1, 2) or y[0].size != 1:
            raise OrtBenchError(
                f"the model's loss reads int64 class labels ({labels[0].name!r}, one column): "
                f"y must hold integers, got dtype {y.dtype} and shape {y.shape}"
            )
        return np.ascontiguousarray(y.reshape(-1, 1), dtype=np.int64)

    def _prepare_model(self) -> None:
        outputs = [o.name for o in load_model(self.model_onnx).graph.output]
        if self.loss_output_name not in outputs:
            raise OrtBenchError(
                f"the model has no output {self.loss_output_name!r}: add a loss with "
                f"add_loss_output first"
            )
        super()._prepare_model()

    def _build(self) -> None:
        super()._build()
        if self.saved_gradient is not None:
            with_loss = select_outputs(self.model_, [self.loss_output_name])
            options = DerivativeOptions.KeepOutputs | DerivativeOptions.FillGrad
            gradient = onnx_derivative(with_loss, self.weights_, inputs=[], options=options)
            onnx.save_model(gradient, self.saved_gradient)
            graphs = self._graphs()
            training = (
                graphs.get("training_model") or graphs.get("fused_step") or graphs["train_step"]
            )
            with open(f"{self.saved_gradient}.training.onnx", "wb") as f:
                f.write(training if isinstance(training, bytes) else training.SerializeToString())


class OrtGradientForwardBackwardOptimizer(_SeedBehaviour, ForwardBackwardTrainer):
    """The seed's forward/backward class: onnxruntime-training computes the model's
    gradient; small ONNX graphs compute the loss, the penalty and the update.

    Parameters
    ----------
    model_onnx : onnx.ModelProto
        The model (no loss in it).
    weights_to_train : list of str, optional
        The initializers to train; None chooses them when the object is created: every
        float initializer that is a parameter (see :func:`trainable_initializers`).
    loss_output_name : str
        Kept for the seed's signature (the loss is not part of the model here).
    max_iter : int
        Epochs.
    training_optimizer_name : str
        ``'SGDOptimizer'`` (the update is the learning rate object's).
    batch_size : int
        Rows per step.
    learning_rate : float, str or BaseLearningRate
        See :meth:`BaseLearningRate.select`; ``'Nesterov'`` adds momentum.
    device : str
        ``'cpu'`` or ``'cuda'``.
    warm_start : bool
        Continue from the previous fit's weights; otherwise draw them anew.
    verbose : int
        Print one progress line per epoch.
    validation_every : int or float
        Score the validation data every that many epochs, or that fraction of max_iter.
    learning_loss : str or BaseLearningLoss
        See :meth:`BaseLearningLoss.select`; ``'square_error'`` is the seed's squared
        error, ``SquareLearningLoss(convention='seed')``.
    enable_logging : bool
        Log one line per epoch (loss, learning rate) to the ``ortbench.seed`` logger.
    weight_name : str, optional
        Kept for the seed's signature: the loss graph always takes the sample weights
        ``fit`` is given (the seed built a weighted loss graph only when it was set).
    learning_penalty : str, BaseLearningPenalty or None
        See :meth:`BaseLearningPenalty.select`.
    exc : bool
        Raise :class:`ConvergenceError` when the loss diverges (True) or warn and stop.
    """

    training_optimizer_name = "SGDOptimizer"

    def __init__(
        self,
        model_onnx,
        weights_to_train=None,
        loss_output_name="loss",
        max_iter=100,
        training_optimizer_name="SGDOptimizer",
        batch_size=10,
        learning_rate="SGD",
        device="cpu",
        warm_start=False,
        verbose=0,
        validation_every=0.1,
        learning_loss="square_error",
        enable_logging=False,
        weight_name=None,
        learning_penalty=None,
        exc=True,
    ):
        if weights_to_train is None:
            weights_to_train = check_weight_names(rewrite_linear_nodes(model_onnx), None)
        self._keep_params(_as_seed_stored(locals()))

    @property
    def trained_coef_(self) -> dict[str, onnxruntime.OrtValue]:
        """Trained weights by name as OrtValues, as the seed returned them."""
        return dict(zip(self.weights_, self.get_state()))

    def get_state(self, kind: str = "weight") -> list[onnxruntime.OrtValue]:
        """The trained weights as OrtValues in ``weights_to_train`` order, as the seed
        returned them (:class:`ForwardBackwardTrainer` returns a dict of arrays).

        Parameters
        ----------
        kind : str
            ``'weight'``, the only kind kept (see :meth:`get_full_state`).

        Returns
        -------
        list of onnxruntime.OrtValue
            Copies on the CPU, each owning its memory.

        Raises
        ------
        OrtBenchError
            For another kind, or before fit.
        """
        _check_kind("get_state", kind)
        state = self._weights_by_name()
        values = []
        for name in self.weights_:
            # an OrtValue owning its memory: ortvalue_from_numpy would borrow the array's
            value = onnxruntime.OrtValue.ortvalue_from_shape_and_type(state[name].shape, np.float32)
            value.update_inplace(state[name])
            values.append(value)
        return values

    def get_full_state(self, kind: str = "weight") -> list:
        """The training graph's inputs the trainer owns: None for each data input, then
        the trained weights (arrays) in ``weights_to_train`` order, the seed's layout.

        Parameters
        ----------
        kind : str
            ``'weight'``, the only kind kept (the engine stores momentum in another form
            than the seed's per-weight velocities).

        Returns
        -------
        list

        Raises
        ------
        OrtBenchError
            For another kind, or before fit.
        """
        _check_kind("get_full_state", kind)
        state = self._weights_by_name()
        inputs = [i.name for i in self._train_model.graph.input if i.name not in state]
        return [None] * len(inputs) + [state[name] for name in self.weights_]

    def set_state(self, state) -> None:
        """Overwrite trained weights: a dict by name, or a list as :meth:`get_full_state`
        or :meth:`get_state` give it (None entries are skipped); arrays or OrtValues.

        Parameters
        ----------
        state : dict or list

        Raises
        ------
        OrtBenchError
            For an unknown name, a wrong shape or a list of the wrong length.
        """
        if isinstance(state, (list, tuple)):
            values = [v for v in state if v is not None]
            if len(values) != len(self.weights_):
                raise OrtBenchError(
                    f"a state list holds {len(self.weights_)} weights ({self.weights_}), "
                    f"got {len(values)}"
                )
            state = dict(zip(self.weights_, values))
        super().set_state(
            {
                name: value.numpy() if isinstance(value, onnxruntime.OrtValue) else value
                for name, value in state.items()
            }
        )


def _check_kind(method: str, kind: str) -> None:
    """Refuse a ``kind`` other than ``'weight'`` with the reason."""
    if kind != "weight":
        raise OrtBenchError(
            f"{method} keeps kind='weight' only, got {kind!r}: the momentum is stored "
            f"scaled and flattened, not as the seed's per-weight velocities"
        )
