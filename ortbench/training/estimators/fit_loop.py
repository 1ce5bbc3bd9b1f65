"""The fit loop: epochs over the staged batches, the learning-rate schedule, divergence,
validation, progress, and warm starts that keep or rebuild the graphs.

The per-batch work is the step object's (:mod:`ortbench.training.steps`): an epoch here is
one call to its ``run_epoch``."""

from __future__ import annotations

import copy
import time
import warnings
from typing import NamedTuple

import numpy as np
from sklearn.base import clone

from ...progress import Progress
from ..errors import ConvergenceError, OrtBenchError
from ..learning_rates import BaseLearningRate, LearningRateAdamW, LearningRateSGD
from ..runtime import capi
from ..runtime.build import quiet_logs
from ..runtime.sessions import SessionMaker, first_line
from ..steps.batches import BatchLoader, RowOrder


class _EpochMark(NamedTuple):
    """What an epoch changes besides the weights, as it stood before the epoch: what
    :meth:`FitLoop._undo_epoch` puts back."""

    t: int  #: samples seen
    n_train: int  #: training losses recorded
    n_val: int  #: validation losses recorded
    rate: BaseLearningRate  #: a copy of the fitted rate
    optimizer_state: list | None  #: copies of the momentum, None without one
    draws: int  #: orders of rows drawn (RowOrder.draws)


#: The batches, and the epochs over them, that time each thread choice of a build (see
#: :meth:`FitLoop._keep_faster_build`).
TIMED_BATCHES = 8
TIMED_ROUNDS = 3


class FitLoop:
    """The epochs of :meth:`fit`, over the step object the trainer builds."""

    #: What seeded the order of the rows (``repr(random_state)``): a fit that does not
    #: warm start, or a new ``random_state``, starts it again; a warm start, pickled or
    #: not, continues it.
    _shuffles_seeded_by: str | None = None

    #: Whether fit warns when it clips ``batch_size`` to the training rows.
    _warns_when_clipping = True

    def fit(self, X, y, sample_weight=None, X_val=None, y_val=None, sample_weight_val=None):
        """Train on (X, y) for ``max_iter`` epochs.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets, or class labels for a classifier.
        sample_weight : array-like of shape (n_samples,), optional
            Non-negative weights of the rows.
        X_val, y_val, sample_weight_val : array-like, optional
            Validation data, scored every ``validation_every`` epochs into
            ``validation_losses_``.

        Returns
        -------
        self
            The fitted trainer.

        Raises
        ------
        OrtBenchError
            For bad parameters or data, or a diverging loss or weights (``get_state()``
            then holds the weights from before the epoch that diverged).

        Notes
        -----
        With ``warm_start=True`` a fitted trainer continues from its weights and
        optimizer state. Hyper-parameters changed since (``set_params``) are honoured:
        the graphs are rebuilt around the weights, and a new learning rate starts its
        schedule where the previous one was; an optimizer state (momentum) restarts from
        zero then, with a warning. A fit refused (bad data, a model that cannot be
        trained) or interrupted before its first epoch leaves the trainer as it was; one
        interrupted (Ctrl-C) during an epoch undoes that epoch and raises
        KeyboardInterrupt saying so: the trainer holds the epochs before it, and a warm
        start goes on from there as the uninterrupted fit would have.
        """
        before = dict(self.__dict__)
        try:
            loader, val = self._start(X, y, sample_weight, X_val, y_val, sample_weight_val)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise
        first = len(self.train_losses_)
        try:
            self._epochs(loader, val)
        finally:  # the epochs of this fit, as scikit-learn counts them, also when one diverged
            self.n_iter_ = len(self.train_losses_) - first
        return self

    def _epochs(self, loader: BatchLoader, val) -> None:
        """The ``max_iter`` epochs over the staged batches, validation and progress; an
        interrupted epoch is undone (:meth:`_interrupted`)."""
        start = time.perf_counter()
        snapshot = self._weights_by_name()
        for epoch in range(1, self.max_iter + 1):
            mark = self._epoch_mark()
            try:
                loss = float(self._run_epoch(loader))
                state = self._weights_by_name()
                if not np.isfinite(loss) or self._weights_overflow(state):
                    self._diverged(epoch, loss, snapshot)
                self.train_losses_.append(loss)
                self.t_ += loader.n_samples
                self._steps.set_learning_rate(self._step_rate(epoch))
                if val is not None and (
                    epoch % self.validation_every == 0 or epoch == self.max_iter
                ):
                    self.validation_losses_.append(self._validation_loss(*val))
            except KeyboardInterrupt:
                self._interrupted(epoch, snapshot, mark)
            except capi.RUN_ERRORS as e:
                self._undo_epoch(snapshot, mark)
                raise OrtBenchError(
                    f"onnxruntime failed in epoch {epoch}, which is undone: {first_line(e)}"
                ) from None
            snapshot = state
            if self.verbose:  # at the rate the epoch trained at, the one before it
                self._report(epoch, loss, mark.rate.value, time.perf_counter() - start)

    def _epoch_mark(self) -> _EpochMark:
        """What an epoch changes besides the weights, as it stands before the epoch."""
        return _EpochMark(
            self.t_,
            len(self.train_losses_),
            len(self.validation_losses_),
            copy.copy(self.learning_rate_),
            self._steps.get_optimizer_state(),
            getattr(self._shuffles, "draws", 0),
        )

    def _undo_epoch(self, snapshot: dict[str, np.ndarray], mark: _EpochMark) -> None:
        """Put back what an epoch left unfinished changed (weights, optimizer state,
        counters, the order of the rows): the trainer is as the previous epoch left it,
        and a warm start goes on as if the epoch had not started."""
        t, n_train, n_val, rate, optimizer_state, draws = mark
        self.set_state(snapshot)
        if optimizer_state is not None:
            self._steps.set_optimizer_state(optimizer_state)
        self.t_, self.learning_rate_ = t, rate
        del self.train_losses_[n_train:], self.validation_losses_[n_val:]
        self._steps.set_learning_rate(rate.value)
        if getattr(self._shuffles, "draws", 0) > draws:  # the epoch drew its order: redrawn next
            self._shuffles.undo()

    def _interrupted(self, epoch: int, snapshot: dict[str, np.ndarray], mark: _EpochMark) -> None:
        """Undo the interrupted ``epoch`` (:meth:`_undo_epoch`) and raise KeyboardInterrupt
        saying so."""
        self._undo_epoch(snapshot, mark)
        kept = ""
        if isinstance(mark.rate, LearningRateAdamW):
            kept = " (AdamW's moments, inside onnxruntime, keep its steps)"
        raise KeyboardInterrupt(
            f"{type(self).__name__}.fit interrupted in epoch {epoch}, which is undone{kept}: "
            f"the trainer holds the weights after epoch {epoch - 1} of this fit (n_iter_ = "
            f"{epoch - 1}); fit again with warm_start=True to go on"
        ) from None

    def _start(self, X, y, sample_weight, X_val, y_val, sample_weight_val):
        """Everything a fit does before its first epoch: checks, the model's preparation,
        the build (or the warm start's reuse) and the staged batches; returns the batch
        loader and the checked validation data (None without)."""
        if (X_val is None) != (y_val is None):
            given, missing = ("X_val", "y_val") if y_val is None else ("y_val", "X_val")
            raise OrtBenchError(f"{given} without {missing}: give both to validate, or neither")
        self._check_params()
        self._batch_rows = self._clipped_batch_size(X)
        warm = self.warm_start and self._has_trained_state()
        if warm and not _same_model(self.model_onnx, getattr(self, "_fitted_model", None)):
            warnings.warn(
                f"{type(self).__name__}: warm start does not apply, model_onnx changed since "
                f"the last fit: training starts from the new model's weights",
                UserWarning,
                stacklevel=2,
            )
            self.__dict__.pop("_pickled_state", None)
            warm = False
        if warm:
            self._restore_pickled()
        rebuild = not warm or self._build_key() != self._built_key
        if rebuild:
            state = self._weights_by_name() if warm else None
            optimizer_state = self._kept_optimizer_state() if warm else None
            self._prepare_model()
            self._fitted_model = self.model_onnx
        self._check_feature_names(X, reset=True)
        X, Y, w = self._check_data(X, y, sample_weight, fitted_classes=warm)
        self.n_features_in_ = X.shape[1]
        val = None
        if X_val is not None:
            self._check_feature_names(X_val, reset=False)
            val = self._check_data(X_val, y_val, sample_weight_val, fitted_classes=True)
        if not warm or self._shuffles_seeded_by != repr(self.random_state):
            self._shuffles = RowOrder(self.random_state)
            self._shuffles_seeded_by = repr(self.random_state)
        if not warm:
            self.learning_rate_ = self._new_learning_rate()
            self.t_ = 0
            self.train_losses_ = []
            self.validation_losses_ = []
        elif not self._rate_unchanged():
            # the schedule goes on from the samples seen, at the new hyper-parameters
            self.learning_rate_ = self._new_learning_rate()
            if self.t_:
                self.learning_rate_.update_learning_rate(self.t_)
        if w is None:
            w = np.ones(len(X), dtype=np.float32)
        if rebuild:
            self._build_around(state, optimizer_state, [X, Y, w])
        self._steps.set_learning_rate(self._step_rate(0))
        loader = self._loader_for([X, Y, w], reuse=warm and not rebuild)
        self._predictor = None
        return loader, val

    def _clipped_batch_size(self, X) -> int:
        """The rows of a batch: ``batch_size``, or the rows of ``X`` where it has fewer,
        with a warning as scikit-learn's MLP gives (checking ``X`` is :meth:`_check_data`'s)."""
        try:
            rows = len(X)
        except TypeError:
            return self.batch_size
        if not 1 <= rows < self.batch_size:
            return self.batch_size
        if self._warns_when_clipping:
            warnings.warn(
                f"{type(self).__name__}: batch_size={self.batch_size} is larger than the "
                f"{rows} training rows: it is clipped to {rows}, as scikit-learn's MLP does",
                UserWarning,
                stacklevel=3,
            )
        return rows

    def _run_epoch(self, loader: BatchLoader) -> float:
        """Train on every batch of the loader's next epoch; return the epoch loss."""
        loader.epoch()
        return self._steps.run_epoch()

    def _step_rate(self, epoch: int) -> float:
        """The rate the steps use after ``epoch`` epochs of this fit (0: its first epoch's);
        the schedule's ``t`` is ``self.t_``, the samples seen."""
        if epoch:
            self.learning_rate_.update_learning_rate(self.t_)
        return self.learning_rate_.value

    def _weights_overflow(self, state: dict[str, np.ndarray]) -> bool:
        """Whether an epoch left weights whose squares overflow float32 (divergence, even
        where the epoch's loss is still finite)."""
        return not all(map(_moderate, state.values()))

    def _diverged(self, epoch: int, loss: float, snapshot: dict[str, np.ndarray]) -> None:
        """Restore the weights from before ``epoch`` and raise the divergence error; the
        optimizer state, no longer finite either, restarts at the next warm start."""
        self.set_state(snapshot)
        self._built_key = None
        what = f"the loss is {loss}"
        if np.isfinite(loss):
            what = "its last update left weights whose squares overflow float32"
        raise ConvergenceError(
            f"training diverged at epoch {epoch}: {what}; get_state() holds the weights "
            f"from before that epoch (lower the learning rate, or scale the targets)"
        )

    def _new_learning_rate(self) -> BaseLearningRate:
        rate = clone(self.learning_rate or LearningRateSGD())
        return rate.init_learning_rate()

    def _rate_unchanged(self) -> bool:
        """Whether the fitted learning rate has the hyper-parameters the estimator's would
        have now (compared as parameters: scikit-learn's ``repr`` costs milliseconds)."""
        new = self._new_learning_rate()
        return type(new) is type(self.learning_rate_) and (
            new.get_params() == self.learning_rate_.get_params()
        )

    def _has_trained_state(self) -> bool:
        """Whether a previous fit left weights to continue from (fitted or unpickled)."""
        return hasattr(self, "train_losses_") and (
            hasattr(self, "_built_key") or hasattr(self, "_pickled_state")
        )

    def _kept_optimizer_state(self):
        """The optimizer state a rebuild carries over: None (restart at zero) when the
        learning rate changed or training diverged."""
        if self._built_key is None or not self._rate_unchanged():
            if self.learning_rate_.n_states:
                warnings.warn(
                    f"{type(self).__name__}: the optimizer state (momentum) restarts from "
                    f"zero with the new hyper-parameters",
                    UserWarning,
                    stacklevel=3,
                )
            return None
        return self._steps.get_optimizer_state()

    def _build_around(self, state, optimizer_state, arrays: list[np.ndarray] | None = None) -> None:
        """Build the graphs and sessions, then load weights and optimizer state into them.

        With the training data ``arrays`` (X, y, weights), a build that may run on one
        thread or on the pool (:meth:`_thread_candidates`) is then timed both ways, and the
        faster kept (:meth:`_keep_faster_build`); without them (an unpickled trainer) it
        runs on the threads the fit chose, ``intra_op_threads_``.
        """
        quiet_logs()
        if arrays is not None:
            candidates = self._thread_candidates()
        elif hasattr(self, "intra_op_threads_"):
            candidates = (self.intra_op_threads_,)
        else:
            candidates = self._thread_candidates()[:1]
        self._build_on(candidates[0])
        self._built_key = self._build_key()
        self._loader = None
        if state is not None:
            if isinstance(self.learning_rate_, LearningRateAdamW):
                warnings.warn(
                    f"{type(self).__name__}: AdamW's moments stay inside onnxruntime and "
                    f"restart from zero when the graphs are rebuilt (warm start with new "
                    f"hyper-parameters, or an unpickled trainer)",
                    UserWarning,
                    stacklevel=3,
                )
            self.set_state(state)
        if optimizer_state is not None:
            self._steps.set_optimizer_state(optimizer_state)
        if len(candidates) > 1:
            self._keep_faster_build(candidates, arrays)
        self._predictor = None

    def _build_on(self, threads: int | None) -> None:
        """Build the step object with its sessions on ``threads`` intra-op threads."""
        self._sessions = SessionMaker(
            self.device,
            threads,
            type(self).__name__,
            self._steps_class().large_sessions == 1,
            update_threads=self._choose_update_threads(threads),
        )
        self._build()
        self.intra_op_threads_ = threads

    def _keep_faster_build(
        self, candidates: tuple[int | None, ...], arrays: list[np.ndarray]
    ) -> None:
        """Build the steps once more per other thread choice, time epochs over the first
        :data:`TIMED_BATCHES` batches of the data on each build in turn, and keep the one
        whose fastest epoch was the fastest, with the weights and optimizer state the
        current build had before (the first build with them where interrupted).

        The first build is the current one. The timed epochs draw no random number, so
        the fit's batches and trajectory do not depend on the choice."""
        rows = min(len(arrays[0]), TIMED_BATCHES * self._batch_rows)
        loader = BatchLoader([a[:rows] for a in arrays], self._batch_rows, self.device)
        weights, optimizer_state = self._steps.get_state(), self._steps.get_optimizer_state()
        builds = [(self._steps, self._sessions, candidates[0])]
        best: list[float] = []
        try:
            for threads in candidates[1:]:
                self._build_on(threads)
                builds.append((self._steps, self._sessions, threads))
            for steps, _, _ in builds:
                steps.set_learning_rate(self._step_rate(0))
                steps.start_fit(loader)
                steps.run_epoch()  # the first run of a session allocates its memory
            times = [[] for _ in builds]
            for _ in range(TIMED_ROUNDS):
                for (steps, _, _), spent in zip(builds, times):
                    start = time.perf_counter()
                    steps.run_epoch()
                    spent.append(time.perf_counter() - start)
            best = [min(spent) for spent in times]
        finally:  # interrupted, the first build, with the values it had
            fastest = best.index(min(best)) if best else 0
            self._steps, self._sessions, self.intra_op_threads_ = builds[fastest]
            for name, value in weights.items():
                self._steps.set(name, value)
            if optimizer_state is not None:
                self._steps.set_optimizer_state(optimizer_state)

    def _loader_for(self, arrays: list[np.ndarray], reuse: bool) -> BatchLoader:
        """The staged batches: the previous fit's, refilled, when a warm start allows it.

        Keeping the loader keeps every binding made over its buffers, which makes a
        warm-started fit start as fast as the next epoch of the previous one.
        """
        loader = getattr(self, "_loader", None)
        same = (
            reuse
            and loader is not None
            and self._loader_batch_size == self._batch_rows
            and loader.shuffle == self.shuffle
            and loader.refill(arrays)
        )
        if same:
            loader.rows = self._shuffles
        else:
            loader = BatchLoader(
                arrays, self._batch_rows, self.device, self.shuffle, self._shuffles
            )
            self._loader, self._loader_batch_size = loader, self._batch_rows
            self._steps.start_fit(loader)
        return loader

    def _report(self, epoch: int, loss: float, rate: float, elapsed: float) -> None:
        """Show an epoch, its loss and the rate it trained at: a bar on a terminal, one
        line per epoch otherwise."""
        if epoch == 1:
            self._progress = Progress(self.max_iter, type(self).__name__, "epoch")
        extra = f" val={self.validation_losses_[-1]:.6g}" if self.validation_losses_ else ""
        self._progress.step(f"loss={loss:.6g}{extra} lr={rate:.3g}", elapsed)


def _same_model(model, fitted) -> bool:
    """Whether ``model_onnx`` is still the model of the last fit: the same object, or an
    equal one (protobuf messages compare by content, paths and bytes by value)."""
    return model is fitted or (type(model) is type(fitted) and model == fitted)


def _moderate(weight: np.ndarray) -> bool:
    """Whether the squared norm of a weight is finite in float32: no NaN, no infinity, and
    no value so large (beyond about 1e19) that the next forward pass would overflow."""
    flat = weight.ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.dot(flat, flat)))
