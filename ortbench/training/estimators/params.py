"""A trainer's hyper-parameters, trained weights and pickles.

The hyper-parameters are checked and turned into what the builds need (backend, threads,
the key of a build); the trained weights are read and written by name; a pickle keeps the
hyper-parameters, the fitted attributes and a snapshot of the weights and optimizer state,
and the sessions are rebuilt around it on first use."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
from sklearn.base import BaseEstimator

from ..errors import NotFittedTrainerError, OrtBenchError
from ..gradients.derivative import choose_backend
from ..learning_rates import BaseLearningRate, LearningRateAdamW, LearningRateSGD
from ..runtime.devices import check_device
from ..runtime.sessions import l2_cache_bytes

#: Steps below this much work (batch size x trained values, about the multiply-adds of a
#: forward pass) run on one intra-op thread when ``intra_op_threads='auto'``: below it
#: handing kernels to onnxruntime's pool costs more than it saves (measured on 2 cores,
#: ``benchmarks/README.md``). Above it, see :data:`TIMED_THREADS_WORK`.
ONE_THREAD_WORK = 2**19


#: The same limit for step objects that run two large sessions in turn (the portable
#: forward and gradient sessions): their pools do not spin, since each pool's spinning
#: threads would hold the cores the other pool's kernels need, and a pool that does not
#: spin wins only from larger steps.
TWO_POOLS_ONE_THREAD_WORK = 2**23


#: Steps of more work than :data:`ONE_THREAD_WORK` and less than this, on the CPU, run on
#: whichever of one thread and onnxruntime's pool (its threads spinning between kernels)
#: was faster over a few batches timed when a fit builds them: which one wins there differs
#: from one machine to the next (``benchmarks/README.md``, "One thread or the pool, timed
#: by the fit"). Larger steps run on the pool.
TIMED_THREADS_WORK = 2**24

#: The most trained values a build is timed for: the timing holds two builds at once.
TIMED_THREADS_VALUES = 2**20


#: The rows of the stacked momentum update: weight and state of both parities, and the step
#: (see :mod:`ortbench.training.steps.buffers`).
STACKED_ROWS = 5


class TrainerParams(BaseEstimator):
    """Hyper-parameters, trained weights and pickling of a trainer."""

    def _keep_params(self, params: dict) -> None:
        """Store the constructor's arguments (its ``locals()``) unchanged, one attribute
        each, as scikit-learn expects of an estimator's ``__init__``."""
        for name in self._get_param_names():
            setattr(self, name, params[name])

    def set_params(self, **params):
        """Set hyper-parameters, nested ones too (``learning_rate__eta0``), as scikit-learn's
        estimators do; a nested one of ``learning_rate=None`` sets it on the default rate,
        :class:`~ortbench.training.LearningRateSGD`, which the trainer then holds.

        Raises
        ------
        OrtBenchError
            For a nested parameter of another hyper-parameter left None (chosen at fit).
        """
        for key in list(params):
            name, nested, _ = key.partition("__")
            if not nested or params.get(name) is not None or getattr(self, name, 0) is not None:
                continue
            if name != "learning_rate":
                raise OrtBenchError(
                    f"cannot set {key}: {name} is None (chosen at fit): give {name} an object "
                    f"first, then its parameters"
                )
            params[name] = LearningRateSGD()  # scikit-learn sets it before its parameters
        return super().set_params(**params)

    def _check_params(self) -> None:
        self._backend = choose_backend(self.backend)
        check_device(self.device, self._backend)
        verbose = self.verbose
        if not isinstance(verbose, (bool, int, np.integer)) or verbose < 0:
            raise OrtBenchError(f"verbose must be a bool or an integer >= 0, got {verbose!r}")
        for name in ("shuffle", "warm_start"):
            if getattr(self, name) not in (True, False):
                raise OrtBenchError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("batch_size", "max_iter", "validation_every"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise OrtBenchError(f"{name} must be an integer >= 1, got {value!r}")
        rate = self.learning_rate
        if rate is not None and not isinstance(rate, BaseLearningRate):
            raise OrtBenchError(
                f"learning_rate must be a LearningRateSGD-like object, got {type(rate).__name__}"
            )
        (rate or LearningRateSGD()).check()

    def _trained_values(self) -> int:
        inits = self.model_.graph.initializer
        return sum(int(np.prod(i.dims)) for i in inits if i.name in self.weights_)

    def _thread_candidates(self) -> tuple[int | None, ...]:
        """The intra-op threads a build may run its sessions on: one choice, or, with
        ``'auto'`` between :data:`ONE_THREAD_WORK` and :data:`TIMED_THREADS_WORK` on the
        CPU, one thread and the pool, which :meth:`fit` times before it keeps one."""
        threads = self.intra_op_threads
        if threads == "auto":
            work = self._batch_rows * self._trained_values()
            if work < ONE_THREAD_WORK:
                return (1,)
            if work < TIMED_THREADS_WORK and self._can_time_threads():
                return (1, None)
            pools = self._steps_class().large_sessions
            limit = ONE_THREAD_WORK if pools == 1 else TWO_POOLS_ONE_THREAD_WORK
            return (1,) if work < limit else (None,)
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise OrtBenchError(f"intra_op_threads must be 'auto', None or >= 1, got {threads!r}")
        return (threads,)

    def _can_time_threads(self) -> bool:
        """Whether a build can time its steps and put every value back after: on the CPU,
        up to :data:`TIMED_THREADS_VALUES` trained values, with an optimizer whose state the
        steps hand out (not AdamW's, kept inside the runtime)."""
        return (
            self.device == "cpu"
            and self._trained_values() <= TIMED_THREADS_VALUES
            and not isinstance(self.learning_rate_, LearningRateAdamW)
        )

    def _choose_update_threads(self, threads: int | None) -> int | None:
        """The stacked momentum update's threads, given the step's: one, but with
        ``'auto'`` the pool where the step runs on one thread and the update's rows
        (:data:`STACKED_ROWS` floats per trained value) outgrow one core's L2 cache, so
        that the cores' caches hold them together."""
        if self.intra_op_threads != "auto" or threads != 1:
            return 1
        l2 = l2_cache_bytes()
        rows = STACKED_ROWS * 4 * self._trained_values()
        return None if l2 is not None and rows > l2 else 1

    #: Hyper-parameters that do not change the graphs: a warm start keeps them built.
    _RUN_PARAMS = frozenset(
        (
            "model_onnx",
            "max_iter",
            "verbose",
            "warm_start",
            "validation_every",
            "random_state",
            "shuffle",
        )
    )

    def _build_key(self) -> str:
        """What the graphs were built for: every other hyper-parameter and the rows of a
        batch, as text."""
        params = self.get_params(deep=True)
        kept = sorted((k, repr(v)) for k, v in params.items() if k not in self._RUN_PARAMS)
        return repr((kept, self._batch_rows))

    def get_state(self) -> dict[str, np.ndarray]:
        """The trained weights.

        Returns
        -------
        dict of str to numpy.ndarray
            Copies of the current weights, by name.

        Raises
        ------
        OrtBenchError
            Before the first fit.
        """
        return self._weights_by_name()

    def _weights_by_name(self) -> dict[str, np.ndarray]:
        """Copies of the trained weights by name, what the fit loop, predictions and
        pickling read (the seed's forward/backward class changes what ``get_state``
        returns, not this)."""
        self._check_fitted()
        return self._steps.get_state()

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Overwrite trained weights by name.

        Parameters
        ----------
        state : dict of str to array-like
            New values of some or all of the trained weights, with their shapes.

        Raises
        ------
        OrtBenchError
            Before the first fit, for an unknown weight or a wrong shape.
        """
        self._check_fitted()
        for name, array in state.items():
            if name not in self.weights_:
                raise OrtBenchError(f"unknown weight {name!r}: trained weights are {self.weights_}")
            if not np.isfinite(array).all():
                raise OrtBenchError(f"weight {name!r} contains NaN or infinity")
            expected = self._steps.shape(name)
            array = np.ascontiguousarray(array, dtype=np.float32)
            if array.shape != expected:
                raise OrtBenchError(f"weight {name!r} has shape {expected}, got {array.shape}")
            self._steps.set(name, array)
        self._predictor = None

    def __sklearn_is_fitted__(self) -> bool:
        """True once a fit has built the trainer's steps, or for an unpickled fitted
        trainer (scikit-learn's fitted check)."""
        return hasattr(self, "_steps") or hasattr(self, "_pickled_state")

    def _check_fitted(self) -> None:
        self._restore_pickled()
        if not self.__sklearn_is_fitted__():
            raise NotFittedTrainerError(
                f"this {type(self).__name__} is not fitted yet: call fit first"
            )

    #: Private attributes a pickle keeps: every other one (sessions, bindings, buffers)
    #: is rebuilt on first use from the hyper-parameters and the fitted attributes.
    _PICKLED_PRIVATE = frozenset(
        (
            "_sklearn_version",
            "_y_1d",
            "_pickled_state",
            "_fitted_model",
            "_batch_rows",
            "_shuffles",
            "_shuffles_seeded_by",
        )
    )

    def __getstate__(self) -> dict:
        """The hyper-parameters, the fitted attributes, and a snapshot of the weights and
        optimizer state; no onnxruntime object."""
        state = {
            k: v
            for k, v in super().__getstate__().items()
            if not k.startswith("_") or k in self._PICKLED_PRIVATE
        }
        if "_pickled_state" not in state and self._has_trained_state():
            optimizer_state = self._steps.get_optimizer_state()
            state["_pickled_state"] = (self._weights_by_name(), optimizer_state, self._built_key)
        return state

    def _restore_pickled(self) -> None:
        """Rebuild sessions and buffers of an unpickled trainer around its snapshot."""
        pickled = self.__dict__.pop("_pickled_state", None)
        if pickled is None:
            return
        weights, optimizer_state, built_key = pickled
        fitted = {k: v for k, v in vars(self).items() if k.endswith("_") and k[0] != "_"}
        self._check_params()
        # prepared again from the model the fit prepared (pickled), not from model_onnx:
        # a file named there may be gone, or hold another model, where the pickle is read
        source = self.model_onnx
        self.model_onnx = self.model_
        try:
            with warnings.catch_warnings():  # what the fit said of the model, said once
                warnings.simplefilter("ignore")
                self._prepare_model()
        finally:
            self.model_onnx = source
        vars(self).update(fitted)
        self._build_around(weights, optimizer_state)
        self._built_key = built_key

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        """scikit-learn's repr, with the model summarised instead of printed as protobuf text
        (or its serialized bytes)."""
        model = self.model_onnx
        if isinstance(model, (onnx.ModelProto, bytes)):
            summary = _ModelSummary(model)
            try:
                self.model_onnx = summary
                return super().__repr__(N_CHAR_MAX)
            finally:
                self.model_onnx = model
        return super().__repr__(N_CHAR_MAX)


class _ModelSummary:
    def __init__(self, model: onnx.ModelProto | bytes):
        if isinstance(model, bytes):
            self.text = f"<serialized model: {len(model):,} bytes>"
        else:
            self.text = f"<ModelProto {model.graph.name!r}: {len(model.graph.node)} nodes>"

    def __repr__(self) -> str:
        return self.text
