"""The seed's helpers its users call: a batch iterator, type and device look-ups.

onnxcustom exposed these next to its two classes; :mod:`.seed` re-exports them. The
trainers do not use them: their own loader (:mod:`.steps.batches`) stages batches once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from sklearn.utils import check_random_state

from ..errors import OrtBenchError
from ..graphs.shapes import inferred_shapes
from ..graphs.weights import trainable_initializers
from ..runtime import capi
from ..runtime.devices import ort_device, providers

_PROTO_TYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
}
_TYPE_NAMES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
}


def proto_type_to_dtype(proto_type: int | str) -> type:
    """The numpy type of an ONNX element type, given as its number or as onnxruntime
    writes it (``'tensor(double)'``).

    Raises
    ------
    ValueError
        For a type the trainers do not handle.
    """
    found = (_TYPE_NAMES if isinstance(proto_type, str) else _PROTO_TYPES).get(proto_type)
    if found is None:
        raise ValueError(
            f"element type {proto_type!r} is not one of {sorted(_PROTO_TYPES)} "
            f"or {sorted(_TYPE_NAMES)}"
        )
    return found


def dtype_to_var_type(dtype) -> type:
    """The skl2onnx variable type (``FloatTensorType``, ...) of a numpy dtype.

    Raises
    ------
    ValueError
        For another dtype than float32, float64, int64 or int32.
    """
    from skl2onnx.common import data_types

    types = {
        np.float32: data_types.FloatTensorType,
        np.float64: data_types.DoubleTensorType,
        np.int64: data_types.Int64TensorType,
        np.int32: data_types.Int32TensorType,
    }
    found = types.get(np.dtype(dtype).type)
    if found is None:
        raise ValueError(f"dtype {dtype!r} has no skl2onnx variable type here")
    return found


def get_onnx_opset(onx: onnx.ModelProto, domain: str = "") -> int:
    """The opset ``onx`` imports for ``domain`` (the main domain by default).

    Raises
    ------
    ValueError
        When the model imports no opset of that domain.
    """
    for opset in onx.opset_import:
        if opset.domain == domain:
            return opset.version
    raise ValueError(f"the model imports no opset of domain {domain!r}")


def device_to_providers(device: str) -> list:
    """onnxruntime's execution providers for ``'cpu'``, ``'cuda'`` or ``'cuda:N'``."""
    return providers(device)


def get_train_initializer(
    onx: onnx.ModelProto,
) -> dict[str, tuple[np.ndarray, onnx.TensorProto]]:
    """The initializers a training would update: name to (value, initializer), the
    seed's order.

    Skips what :func:`trainable_initializers` skips (scalars, integers, the ``1`` of
    ``1 - p``).
    """
    names = set(trainable_initializers(onx))
    return {
        init.name: (numpy_helper.to_array(init), init)
        for init in onx.graph.initializer
        if init.name in names
    }


def rewrite_op_no_grad(onx: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``onx`` where every ``Reciprocal(x)`` is ``Div(1, x)``.

    The seed rewrote the operators onnxruntime-training could not differentiate then;
    both gradient backends of ortbench differentiate ``Reciprocal`` now, so the rewrite is
    kept for code that calls it (the seed named it ``_rewrite_op_no_grad``).

    Parameters
    ----------
    onx : onnx.ModelProto
        The model.

    Returns
    -------
    onnx.ModelProto
        The same computation without ``Reciprocal`` nodes.
    """
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(onx)
    nodes = [n for n in rewritten.graph.node if n.op_type == "Reciprocal"]
    if not nodes:
        return rewritten
    _, types = inferred_shapes(rewritten)
    for node in nodes:
        elem = types.get(node.input[0]) or TensorProto.FLOAT
        one = numpy_helper.from_array(
            np.ones(1, dtype=proto_type_to_dtype(elem)), f"{node.output[0]}_rewritten_one"
        )
        rewritten.graph.initializer.append(one)
        node.op_type = "Div"
        node.input[:] = [one.name, node.input[0]]
    return rewritten


class OrtDataLoader:
    """Batches of ``X``, ``y`` and optional sample weights, as numpy arrays or OrtValues.

    Parameters
    ----------
    X : numpy.ndarray of shape (n_samples, n_features)
    y : numpy.ndarray of shape (n_samples,) or (n_samples, 1)
        Stored as a column.
    sample_weight : numpy.ndarray of shape (n_samples,), optional
    batch_size : int
        Rows per batch, at most ``n_samples``. Every batch has this many rows: when
        ``n_samples`` is not a multiple, the last one ends with the data set's last row
        (it overlaps the one before).
    device : str
        Where :meth:`iter_ortvalue` places its OrtValues.
    random_iter : bool
        Whether every iteration visits the rows in a new random order.
    random_state : int, RandomState or None
        Seeds that order.

    Attributes
    ----------
    data_np : tuple of numpy.ndarray
        The arrays, dtypes kept, ``y`` as a column.
    data_ort : tuple of OrtValue
        The same arrays on ``device``.
    desc : list of (shape, dtype)
        One entry per array.
    """

    def __init__(
        self,
        X,
        y,
        sample_weight=None,
        batch_size: int = 20,
        device: str = "cpu",
        random_iter: bool = True,
        random_state=None,
    ):
        X, y = np.asarray(X), np.asarray(y)
        if y.ndim == 1:
            y = y.reshape((-1, 1))
        arrays = [X, y] if sample_weight is None else [X, y, np.asarray(sample_weight)]
        if any(len(a) != len(X) for a in arrays) or len(X) == 0:
            raise OrtBenchError(
                f"X, y and sample_weight must have as many rows, got {[len(a) for a in arrays]}"
            )
        if batch_size < 1:
            raise OrtBenchError(f"batch_size must be >= 1, got {batch_size}")
        self.device = device
        self.batch_size = min(batch_size, len(X))
        self.random_iter = random_iter
        self.random_state = random_state
        self._set(tuple(np.ascontiguousarray(a) for a in arrays))

    def _set(self, data_np: tuple) -> None:
        where = ort_device(self.device)
        self.data_np = data_np
        self.data_ort = tuple(capi.OrtValue.ortvalue_from_numpy(a, where) for a in data_np)
        self.desc = [(a.shape, a.dtype.type) for a in data_np]
        self._rng = check_random_state(self.random_state)

    def __getstate__(self) -> dict:
        """OrtValues do not pickle: the arrays do, and are placed again when loaded."""
        state = self.__dict__.copy()
        for name in ("data_ort", "desc", "_rng"):
            del state[name]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._set(self.data_np)

    def __repr__(self) -> str:
        return (
            f"OrtDataLoader(...(X: {self.desc[0][0]}), batch_size={self.batch_size}, "
            f"device={self.device!r}, random_iter={self.random_iter})"
        )

    def __len__(self) -> int:
        """Batches per iteration."""
        return -(-len(self.data_np[0]) // self.batch_size)

    def _batches(self) -> Iterator[tuple[np.ndarray, ...]]:
        n = len(self.data_np[0])
        starts = [min(k * self.batch_size, n - self.batch_size) for k in range(len(self))]
        if self.random_iter:
            order = self._rng.permutation(n)
            for s in starts:
                rows = order[s : s + self.batch_size]
                yield tuple(a[rows] for a in self.data_np)
        else:
            for s in starts:
                yield tuple(a[s : s + self.batch_size] for a in self.data_np)

    def iter_numpy(self) -> Iterator[tuple[np.ndarray, ...]]:
        """Yield ``(X, y)`` or ``(X, y, sample_weight)`` batches as numpy arrays."""
        yield from self._batches()

    def iter_ortvalue(self) -> Iterator[tuple]:
        """Yield the same batches as OrtValues on ``device``."""
        where = ort_device(self.device)
        for batch in self._batches():
            yield tuple(capi.OrtValue.ortvalue_from_numpy(a, where) for a in batch)
