"""Stage a data set once on the device and hand out per-batch OrtValues.

On CPU each batch is an OrtValue viewing a slice of one contiguous host buffer: a new
epoch shuffles rows into that buffer in place, so the batch OrtValues, their addresses
and every binding made on them stay valid for the whole fit. On CUDA each batch owns a
device buffer refreshed from the host buffer once per epoch.

Every batch has exactly ``batch_size`` rows: the last one is padded with zero rows of
sample weight 0, which the weighted losses ignore. The trainers' graphs then have a
static batch dimension, which lets onnxruntime fold the shape computations of the
gradient graph (a third of a small step's time).

Each batch also carries two (batch_size, 1) columns: the loss scale, each row's sample
weight over the batch's total (0 for a batch without weight), which both trainers' loss
graphs read, and the gradient scale, the loss scale times a factor the forward/backward
trainer sets (the optimizer's step factor, -lr for plain SGD). They are data, not model:
computing them here once per epoch (and when the factor changes) saves every step the
nodes of a weighted mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse
from sklearn.utils import check_random_state

from ..errors import OrtBenchError
from ..runtime import capi
from ..runtime.devices import ort_device, parse_device


def as_float_matrix(X, name: str) -> np.ndarray:
    """``X`` as a contiguous float32 matrix of finite numbers.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        A numpy array, a list of rows, or a pandas DataFrame (nullable columns included:
        their missing values count as NaN).
    name : str
        What the error messages call it.

    Returns
    -------
    numpy.ndarray of float32

    Raises
    ------
    OrtBenchError
        For a sparse or complex matrix, another shape than 2-D, no row, a non-numeric
        dtype, NaN or infinity.
    """
    if scipy.sparse.issparse(X):
        raise OrtBenchError(f"{name} is a sparse matrix: pass a dense array ({name}.toarray())")
    if hasattr(X, "to_numpy") and hasattr(X, "dtypes"):  # pandas, nullable dtypes included
        try:
            X = X.to_numpy(dtype=np.float32, na_value=np.nan)
        except (TypeError, ValueError):
            raise OrtBenchError(
                f"{name} must be numeric, got columns of dtypes "
                f"{sorted({str(d) for d in X.dtypes})}"
            ) from None
    X = np.asarray(X)
    if X.ndim != 2:
        raise OrtBenchError(f"{name} must be a 2-D array, got shape {X.shape}")
    if len(X) == 0:
        raise OrtBenchError(f"{name} is empty")
    if np.issubdtype(X.dtype, np.complexfloating):
        raise OrtBenchError(f"{name} is complex: pass its real part or its magnitude")
    if not np.issubdtype(X.dtype, np.number) and X.dtype != bool:
        raise OrtBenchError(f"{name} must be numeric, got dtype {X.dtype}")
    with np.errstate(over="ignore"):  # told below, in one line
        converted = np.ascontiguousarray(X, dtype=np.float32)
    if not np.isfinite(converted).all() and np.isfinite(X).all():
        raise OrtBenchError(
            f"{name} holds values beyond float32's range (largest magnitude "
            f"{np.abs(X).max():.3g}, float32's {np.finfo(np.float32).max:.3g}): scale it "
            "(sklearn.preprocessing.StandardScaler)"
        )
    X = converted
    if not np.isfinite(X).all():
        raise OrtBenchError(
            f"{name} contains NaN or infinity: drop or fill those rows "
            "(sklearn.impute.SimpleImputer fills them)"
        )
    return X


def check_sample_weight(sample_weight, n_samples: int) -> np.ndarray:
    """Sample weights as float32, refused when they would train nothing or overflow.

    Raises
    ------
    OrtBenchError
        For another shape than (n_samples,), a negative, NaN or infinite weight, weights
        that are all zero, or weights whose float32 sum overflows.
    """
    try:
        w = np.ascontiguousarray(sample_weight, dtype=np.float32)
    except (TypeError, ValueError):
        raise OrtBenchError("sample_weight must be numeric") from None
    if w.shape != (n_samples,):
        raise OrtBenchError(f"sample_weight must have shape ({n_samples},), got {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise OrtBenchError("sample_weight must be finite and >= 0")
    with np.errstate(over="ignore"):
        total = w.sum(dtype=np.float32)
    if total == 0:
        raise OrtBenchError("sample_weight is zero everywhere: nothing would be trained")
    if not np.isfinite(total):
        raise OrtBenchError(
            "sample_weight sums beyond float32's range: divide the weights by their maximum"
        )
    return w


@dataclass
class Batch:
    """One batch: OrtValues (X, y, sample weights), its real rows, its scale columns, and
    its labels times the gradient scales once the loader stages them
    (:meth:`BatchLoader.stage_scaled_labels`)."""

    values: tuple
    length: int
    loss_scale: capi.OrtValue
    grad_scale: capi.OrtValue
    scaled_label: capi.OrtValue | None = None


class RowOrder:
    """The order of the training rows, epoch after epoch, as scikit-learn's MLP shuffles
    them: each epoch shuffles the previous epoch's order (``order[permutation(n)]``), so
    that from one seed every contender sees the rows in scikit-learn's order. A trainer
    keeps one across warm starts and pickles.

    Parameters
    ----------
    random_state : int, RandomState or None
        Seeds the shuffles (a ``RandomState`` is used as it is).
    """

    def __init__(self, random_state=None):
        self.rng = check_random_state(random_state)
        self.order = np.arange(0)
        #: How many orders were drawn (an epoch's undo compares it to take its draw back).
        self.draws = 0
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self._replay: np.ndarray | None = None

    def next(self, n_samples: int) -> np.ndarray:
        """The next epoch's order of ``n_samples`` rows (a first epoch, or one over data
        of another length, shuffles ``0 .. n_samples - 1``)."""
        if len(self.order) != n_samples:
            self.order = np.arange(n_samples)
        replay = getattr(self, "_replay", None)  # a pickle from before it has none
        if replay is not None and len(replay) == n_samples:
            permutation = replay
        else:
            permutation = self.rng.permutation(n_samples)
        self._replay = None
        self._last = (self.order, permutation)  # references, no copy: order is replaced
        self.order = self.order[permutation]
        self.draws = getattr(self, "draws", 0) + 1
        return self.order

    def undo(self) -> None:
        """Take back the last draw: the order goes back to the one before it, and the
        next draw gives the same permutation again (the random state is not rewound:
        keeping the permutation costs nothing per epoch)."""
        self.order, self._replay = self._last
        self.draws -= 1


class BatchLoader:
    """Yields the same :class:`Batch` objects every epoch, refilled in place."""

    def __init__(
        self,
        arrays: list[np.ndarray],
        batch_size: int,
        device: str = "cpu",
        shuffle: bool = False,
        rows: RowOrder | None = None,
    ):
        """``arrays`` are X, y and sample weights, with as many rows each; ``rows`` orders
        them when ``shuffle`` (a new :class:`RowOrder` where not given)."""
        self.n_samples = len(arrays[0])
        n_batches = -(-self.n_samples // batch_size)
        self._sources = arrays
        self._host = []
        for array in arrays:
            host = np.zeros((n_batches * batch_size, *array.shape[1:]), dtype=array.dtype)
            host[: self.n_samples] = array
            self._host.append(host)
        self._scales = np.zeros((2, n_batches, batch_size), dtype=np.float32)
        self._scaled_labels: np.ndarray | None = None  # see stage_scaled_labels
        self._factor = 1.0
        self.shuffle = shuffle
        #: The order of the rows, epoch after epoch (a trainer hands its own, so that a
        #: warm start continues it).
        self.rows = rows or RowOrder()
        self._on_cpu = parse_device(device)[0] == "cpu"
        self._device = ort_device(device)
        self._bounds = [(k * batch_size, (k + 1) * batch_size) for k in range(n_batches)]
        self._rescale()
        self.batches = [
            Batch(
                tuple(self._ortvalue(h[s:e]) for h in self._host),
                min(e, self.n_samples) - s,
                *(self._ortvalue(self._scales[i, k].reshape(-1, 1)) for i in (0, 1)),
            )
            for k, (s, e) in enumerate(self._bounds)
        ]

    def __len__(self) -> int:
        """The number of batches of an epoch."""
        return len(self.batches)

    def set_gradient_factor(self, factor: float) -> None:
        """Make every batch's gradient scale ``factor`` times its loss scale."""
        if factor != self._factor:
            self._factor = factor
            np.multiply(self._scales[0], factor, out=self._scales[1])
            self._scale_labels()
            if not self._on_cpu:  # the gradient scales only: the data did not change
                for k, batch in enumerate(self.batches):
                    batch.grad_scale.update_inplace(self._scales[1, k].reshape(-1, 1))

    def stage_scaled_labels(self) -> None:
        """Stage each row's labels times its gradient scale (``Batch.scaled_label``, (n,
        c) per batch), kept up to date from now on, as the scales are: where a loss's
        gradient is linear in the labels, a graph reads them instead of scaling the
        labels itself (see :class:`~ortbench.training.graphs.loss_graph.LossHead`).

        Raises
        ------
        OrtBenchError
            On CUDA, or for labels that are not a float matrix.
        """
        labels = self._host[1]
        if not self._on_cpu or labels.ndim != 2 or labels.dtype != np.float32:
            raise OrtBenchError("scaled labels are staged for float labels on the CPU only")
        if self._scaled_labels is None:
            self._scaled_labels = np.zeros_like(labels)
            self._scale_labels()
            for batch, (s, e) in zip(self.batches, self._bounds):
                batch.scaled_label = self._ortvalue(self._scaled_labels[s:e])

    def _scale_labels(self) -> None:
        if self._scaled_labels is not None:
            scales = self._scales[1].reshape(-1, 1)
            np.multiply(scales, self._host[1], out=self._scaled_labels)

    def _rescale(self) -> None:
        """Recompute both scale columns (and the scaled labels) from the sample weights
        and the labels now in the buffers."""
        weights = self._host[2].reshape(self._scales.shape[1:])
        totals = weights.sum(axis=1, keepdims=True)
        self._scales[0] = 0  # a batch of zero weights contributes nothing
        np.divide(weights, totals, out=self._scales[0], where=totals > 0)
        np.multiply(self._scales[0], self._factor, out=self._scales[1])
        self._scale_labels()

    def refill(self, arrays: list[np.ndarray]) -> bool:
        """Load new data of the same shapes into the staged buffers, keeping every OrtValue
        (and every binding made on them) valid; False when the shapes differ."""
        if len(arrays) != len(self._sources) or any(
            a.shape != s.shape or a.dtype != s.dtype for a, s in zip(arrays, self._sources)
        ):
            return False
        self._sources = arrays
        for array, host in zip(arrays, self._host):
            host[: self.n_samples] = array
        self._rescale()
        self._refresh_device()
        return True

    def _refresh_device(self) -> None:
        if not self._on_cpu:
            for k, (batch, (s, e)) in enumerate(zip(self.batches, self._bounds)):
                for value, host in zip(batch.values, self._host):
                    value.update_inplace(np.ascontiguousarray(host[s:e]))
                for value, scale in zip((batch.loss_scale, batch.grad_scale), self._scales):
                    value.update_inplace(scale[k].reshape(-1, 1))

    def _ortvalue(self, view: np.ndarray) -> capi.OrtValue:
        if self._on_cpu:
            return capi.OrtValue.ortvalue_from_numpy(view, self._device)
        return capi.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(view), self._device)

    def staged_epoch(self) -> Batch:
        """Every batch at once: one :class:`Batch` whose values stack the batches on a new
        first axis, ``(n_batches, batch_size, ...)``, viewing the staged buffers (each
        epoch's shuffle refills them in place). Its length is ``n_samples``.

        Raises
        ------
        OrtBenchError
            On CUDA, where each batch has its own device buffer.
        """
        if not self._on_cpu:
            raise OrtBenchError("the whole staged epoch is one buffer on the CPU only")
        n_batches, batch_size = self._scales.shape[1:]
        scaled = self._scaled_labels
        return Batch(
            tuple(
                self._ortvalue(h.reshape(n_batches, batch_size, *h.shape[1:])) for h in self._host
            ),
            self.n_samples,
            *(self._ortvalue(self._scales[i, :, :, None]) for i in (0, 1)),
            None if scaled is None else self._ortvalue(scaled.reshape(n_batches, batch_size, -1)),
        )

    def epoch(self) -> list[Batch]:
        """The batches of the next epoch (rows shuffled in place when ``shuffle``)."""
        if self.shuffle:
            order = self.rows.next(self.n_samples)
            for source, host in zip(self._sources, self._host):
                # a permutation needs no bounds check: mode "clip" writes straight into
                # ``out``, where the default first gathers into a temporary copy
                np.take(source, order, axis=0, out=host[: self.n_samples], mode="clip")
            self._rescale()
            self._refresh_device()
        return self.batches
