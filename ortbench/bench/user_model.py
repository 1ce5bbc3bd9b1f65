"""A user's own ONNX model and data as a benchmark problem.

:func:`load_user_problem` reads the model and the data, checks everything a cell would
trip on (a file that is not ONNX, data whose width or type does not fit the model's
input, a missing target column, empty or NaN data, nothing to train, a batch dimension
fixed by a node), each as one line naming the file and what to change, and registers the
problem so that every cell finds it by its file names. Whether a gradient backend can
differentiate the graph is each contender's own question: a contender that cannot gets
its own "unavailable" row, and the others run. The graph gets a scikit-learn reference
model (which the scikit-learn contenders need) only when it is an MLP scikit-learn can
express: MatMul and Add layers with one activation, as skl2onnx converts MLPRegressor,
MLPClassifier and linear models; torch runs any graph (:mod:`ortbench.torch_graph`).

Data files: ``.npz`` (arrays ``X``, ``y`` and optionally ``sample_weight``), ``.npy``
files (X, y and optionally the sample weights, in that order), ``.csv`` and
``.parquet`` (every column but the target and the weight column is a feature).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pandas as pd
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier, MLPRegressor

from ..report.units import plural
from ..training import OrtBenchError
from ..training.graphs.batch_axis import free_batch_axis
from ..training.graphs.loading import load_model
from ..training.graphs.nodes import rewrite_linear_nodes
from ..training.graphs.outputs import select_outputs, sigmoid_output, training_output
from ..training.graphs.weights import check_weight_names, get_initializers
from ..training.losses import LOSSES
from .datasets import split_rows
from .problems import ETA0, Problem, reference_mlp, register

#: Losses a user problem trains with: every loss the engine defines, by its name.
USER_LOSSES = tuple(LOSSES)
#: Rows of the trial forward run that checks the output's width before any cell runs.
TRIAL_ROWS = 16
_HIDDEN_ACTIVATIONS = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "logistic"}
_PASS_THROUGH = {"Identity", "Reshape", "Cast"}
#: The options (``argparse`` destinations) that choose a built-in problem and its data,
#: which ``--model``/``--data`` replace.
REPLACED_OPTIONS = ("problem", "dataset", "hidden", "n_samples", "n_features")

#: The options that only say something of ``--model`` and ``--data``.
OWN_OPTIONS = ("target", "sample_weight", "weights", "loss", "learning_rate")


@dataclass(frozen=True)
class UserFiles:
    """The files and options of ``ortbench bench/profile --model ... --data ...``."""

    model: str
    data: tuple[str, ...]
    target: str | None = None
    sample_weight: str | None = None
    weights: tuple[str, ...] | None = None
    loss: str | None = None
    learning_rate: float | None = None

    @classmethod
    def from_options(cls, options) -> UserFiles | None:
        """The files of the command line's ``--model``/``--data`` options (None: neither).

        Raises
        ------
        OrtBenchError
            For one of the two without the other, or with an option they replace
            (:data:`REPLACED_OPTIONS`, those of the command that has them).
        """
        if options.model is None and options.data is None:
            given = [f"--{o.replace('_', '-')}" for o in OWN_OPTIONS if getattr(options, o, None)]
            if given:
                verb = "goes" if len(given) == 1 else "go"
                raise OrtBenchError(
                    f"{' and '.join(given)} {verb} with --model and --data (your own model): "
                    "give both, or leave them out"
                )
            return None
        if options.model is None or options.data is None:
            raise OrtBenchError("--model and --data go together: give both")
        if any(getattr(options, o, None) for o in REPLACED_OPTIONS):
            *others, last = [f"--{o.replace('_', '-')}" for o in REPLACED_OPTIONS if o in options]
            listed = f"{', '.join(others)} and {last}" if others else last
            raise OrtBenchError(f"--model and --data replace {listed}")
        return cls(  # absolute: workers run in other directories
            os.path.abspath(options.model),
            tuple(os.path.abspath(d) for d in options.data),
            options.target,
            options.sample_weight,
            tuple(options.weights) if options.weights else None,
            options.loss,
            options.learning_rate,
        )

    def to_json(self) -> str:
        """The options as one JSON line (what a profiled subprocess is handed)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> UserFiles:
        values = json.loads(text)
        for key in ("data", "weights"):
            if values[key] is not None:
                values[key] = tuple(values[key])
        return cls(**values)

    @property
    def names(self) -> tuple[str, str]:
        """The problem and data set names of the cells: the files' names."""
        return Path(self.model).name, "+".join(Path(d).name for d in self.data)


def load_user_problem(files: UserFiles, seed: int = 0) -> Problem:
    """Check and load a user's model and data; register and return the problem.

    Parameters
    ----------
    files : UserFiles
        The model file, the data files and the options.
    seed : int
        Seed of the training/validation split (20% held out) and of the shuffles.

    Returns
    -------
    Problem
        Found afterwards by ``make_problem(*files.names)``.

    Raises
    ------
    OrtBenchError
        One line naming the file at fault and what to change.
    """
    model = _load_model(files.model)
    X, y, w = _load_data(files)
    input_name = _check_input(model, X, files)
    try:  # every contender then runs any batch size, and the validation rows
        model = free_batch_axis(model, input_name)
    except OrtBenchError as e:
        raise OrtBenchError(f"{files.model}: {e}") from None
    loss = files.loss or _default_loss(model)
    if loss not in USER_LOSSES:
        raise OrtBenchError(f"--loss {loss!r} is not one of {list(USER_LOSSES)}")
    weights = _check_weights(model, files)
    y = _encoded_labels(y, loss, files)
    task = _task(y, loss, files)
    _check_forward(model, input_name, X, y, loss, files)
    try:
        data = split_rows(X, y, w, task != "regression", seed)
    except ValueError:  # a class too rare to stratify on
        data = split_rows(X, y, w, False, seed)
    name, dataset = files.names
    reference = _reference(model, data, task, seed)
    rate = ETA0 if files.learning_rate is None else files.learning_rate
    if not 0 < rate < np.inf:
        raise OrtBenchError(f"--learning-rate must be a finite number > 0, got {rate!r}")
    return register(
        Problem(
            name,
            dataset,
            task,
            data,
            model,
            seed,
            reference,
            loss,
            weights and tuple(weights),
            eta0=rate,
        )
    )


def _load_model(path: str) -> onnx.ModelProto:
    try:
        model = rewrite_linear_nodes(load_model(path))
    except OrtBenchError as e:
        text = str(e)
        raise OrtBenchError(text if path in text else f"{path}: {text}") from None
    try:
        training_output(model)
    except OrtBenchError as e:
        raise OrtBenchError(f"{path}: {e}: a model to train outputs float values") from None
    return model


def _text_labels(y: np.ndarray) -> bool:
    """Whether ``y`` is one column of strings (class names), none missing."""
    return y.ndim == 1 and y.dtype.kind in "OU" and all(isinstance(v, str) for v in y.tolist())


def _encoded_labels(y: np.ndarray, loss: str, files: UserFiles) -> np.ndarray:
    """Class names as the index of each in their sorted order (the order of the trainers'
    ``classes_``, whose last class is a binary problem's positive one); others as given."""
    if not _text_labels(y):
        return y
    if loss != "log":
        where = files.data[-1] if len(files.data) > 1 else files.data[0]
        names = np.unique(y)
        shown = ", ".join(map(repr, names[:3])) + (", ..." if len(names) > 3 else "")
        raise OrtBenchError(
            f"{where}: y holds class names ({shown}): they train with --loss log; give "
            "numbers for a regression"
        )
    return np.unique(y, return_inverse=True)[1].astype(np.int64)


def _as_numbers(array, path: str, what: str, dtype) -> np.ndarray:
    array = np.asarray(array)
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise OrtBenchError(
            f"{path}: {what} is not numeric (dtype {array.dtype}): keep numbers only"
        )
    if array.size == 0 or len(array) == 0:
        raise OrtBenchError(f"{path}: {what} is empty: give at least one row")
    array = array.astype(dtype)
    if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
        raise OrtBenchError(f"{path}: {what} contains NaN or infinity: drop or fill those rows")
    return array


def _read_table(path: str, files: UserFiles):
    suffix = Path(path).suffix.lower()
    try:
        table = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    except Exception as e:  # pandas and pyarrow raise many types for unreadable files
        line = str(e).strip().splitlines()
        raise OrtBenchError(
            f"{path}: cannot read it as {suffix[1:]} ({type(e).__name__}: {line[0] if line else ''})"
        ) from None
    if len(table) == 0:
        raise OrtBenchError(f"{path}: it has no rows: give at least 2 (training and validation)")
    if files.target is None:
        raise OrtBenchError(f"{path}: name the target column with --target COLUMN")
    columns = [files.target] + ([files.sample_weight] if files.sample_weight else [])
    for option, column in zip(("--target", "--sample-weight"), columns):
        if column not in table.columns:
            raise OrtBenchError(
                f"{path}: no column {column!r} for {option}: its columns are {list(table.columns)}"
            )
    features = table.drop(columns=columns)
    if features.columns.empty:
        named = " and ".join(map(repr, dict.fromkeys(columns)))
        raise OrtBenchError(f"{path}: it has no feature columns besides {named}: give at least one")
    text = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if text:
        raise OrtBenchError(
            f"{path}: feature columns {text[:5]} are not numeric: encode or drop them"
        )
    w = table[files.sample_weight].to_numpy() if files.sample_weight else None
    return features.to_numpy(), table[files.target].to_numpy(), w


def _read_arrays(files: UserFiles):
    paths = files.data
    if files.target is not None or files.sample_weight is not None:
        raise OrtBenchError(
            f"{paths[0]}: --target and --sample-weight name columns of .csv or .parquet data"
        )
    if len(paths) == 1 and paths[0].lower().endswith(".npz"):
        try:
            with np.load(paths[0], allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except Exception as e:  # zipfile and numpy raise several types
            raise OrtBenchError(
                f"{paths[0]}: cannot read it as .npz ({type(e).__name__})"
            ) from None
        missing = {"X", "y"} - set(arrays)
        if missing:
            raise OrtBenchError(
                f"{paths[0]}: no array {sorted(missing)}: save X, y (and sample_weight) with "
                f"numpy.savez; it holds {sorted(arrays)}"
            )
        return arrays["X"], arrays["y"], arrays.get("sample_weight")
    if not all(p.lower().endswith(".npy") for p in paths) or len(paths) not in (2, 3):
        raise OrtBenchError(
            f"--data {' '.join(paths)}: give one .npz, .csv or .parquet file, or two or three "
            ".npy files (X, y, sample weights)"
        )
    arrays = []
    for path in paths:
        try:
            arrays.append(np.load(path, allow_pickle=False))
        except Exception as e:
            raise OrtBenchError(f"{path}: cannot read it as .npy ({type(e).__name__})") from None
    return arrays[0], arrays[1], arrays[2] if len(arrays) == 3 else None


def _load_data(files: UserFiles) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    for path in files.data:
        if not Path(path).is_file():
            raise OrtBenchError(f"data file not found: {path}")
    first = files.data[0]
    if len(files.data) == 1 and Path(first).suffix.lower() in (".csv", ".parquet"):
        X, y, w = _read_table(first, files)
    else:
        X, y, w = _read_arrays(files)
    paths = (files.data * 3)[:3]  # the file of X, y and w: one file, or one .npy each
    X = _as_numbers(X, paths[0], "X", np.float32)
    if X.ndim != 2:
        raise OrtBenchError(f"{paths[0]}: X has shape {X.shape}: give a 2-D array (rows, features)")
    y = np.asarray(y)
    if not _text_labels(y):  # those are class labels, encoded once the loss is known
        y = _as_numbers(
            y, paths[1], "y", y.dtype if np.issubdtype(y.dtype, np.integer) else np.float32
        )
    if len(y) != len(X):
        raise OrtBenchError(f"{paths[1]}: y has {len(y)} rows but X has {len(X)}")
    if w is not None:
        w = _as_numbers(w, paths[2], "the sample weights", np.float32)
        if w.shape != (len(X),):
            raise OrtBenchError(
                f"{paths[2]}: sample weights of shape {w.shape}, expected ({len(X)},)"
            )
        if (w < 0).any() or w.sum() <= 0:
            raise OrtBenchError(f"{paths[2]}: sample weights must be >= 0 with a positive sum")
    if len(X) < 2:
        raise OrtBenchError(f"{paths[0]}: {len(X)} row: give at least 2 (training and validation)")
    return X, y, w


def _check_input(model: onnx.ModelProto, X: np.ndarray, files: UserFiles) -> str:
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise OrtBenchError(
            f"{files.model}: the model has {len(inputs)} data inputs "
            f"{[i.name for i in inputs]}: ortbench feeds one (rows, features) input"
        )
    tensor = inputs[0].type.tensor_type
    if tensor.elem_type != onnx.TensorProto.FLOAT:
        kind = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        raise OrtBenchError(
            f"{files.model}: input {inputs[0].name!r} is {kind}, ortbench feeds float32: "
            "export the model with a float input"
        )
    dims = tensor.shape.dim
    if len(dims) != 2:
        raise OrtBenchError(
            f"{files.model}: input {inputs[0].name!r} has {len(dims)} dimensions: "
            "ortbench feeds (rows, features)"
        )
    if dims[1].dim_value and dims[1].dim_value != X.shape[1]:
        raise OrtBenchError(
            f"{files.data[0]}: {X.shape[1]} features, but {files.model} expects "
            f"{dims[1].dim_value}: give data with as many feature columns"
        )
    return inputs[0].name


def _default_loss(model: onnx.ModelProto) -> str:
    """The log loss for a classifier (a model with an integer label output), else the
    squared error (the trainers' default)."""
    integers = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
    labels = [o for o in model.graph.output if o.type.tensor_type.elem_type in integers]
    return "log" if labels else "squared_error"


def _check_weights(model: onnx.ModelProto, files: UserFiles) -> list[str] | None:
    try:
        check_weight_names(model, list(files.weights) if files.weights else None)
    except OrtBenchError as e:
        raise OrtBenchError(f"{files.model}: {e}: choose weights with --weights NAME") from None
    return list(files.weights) if files.weights else None


def _task(y: np.ndarray, loss: str, files: UserFiles) -> str:
    if loss != "log":
        return "regression"
    where = files.data[-1] if len(files.data) > 1 else files.data[0]
    if y.ndim != 1 or not np.array_equal(y, np.round(y)):
        raise OrtBenchError(
            f"{where}: the log loss needs one column of integer class labels: give labels "
            "or choose --loss squared_error"
        )
    return "binary" if len(np.unique(y)) == 2 else "multiclass"


def _check_forward(model, input_name, X, y, loss, files: UserFiles) -> None:
    """Run the trained output on a few rows; its width must fit the target."""
    output = training_output(model)
    try:
        session = onnxruntime.InferenceSession(
            select_outputs(model, [output]).SerializeToString(), providers=["CPUExecutionProvider"]
        )
        predicted = session.run(None, {input_name: X[:TRIAL_ROWS]})[0]
    except Exception as e:  # onnxruntime raises its own types, one per failure kind
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OrtBenchError(
            f"{files.model}: onnxruntime cannot run it on {files.data[0]}: {line[:200]}"
        ) from None
    width = predicted.shape[1] if predicted.ndim == 2 else 1
    if loss == "log":
        classes = len(np.unique(y))
        binary = width == 1 and classes == 2 and sigmoid_output(model) is not None
        if width < classes and not binary:
            raise OrtBenchError(
                f"{files.model}: output {output!r} has {plural(width, 'column')} for {classes} "
                "classes: the log loss needs one probability column per class, or for two "
                "classes one column made by a Sigmoid (the output's last node)"
            )
        if not np.all((predicted >= 0) & (predicted <= 1)):
            raise OrtBenchError(
                f"{files.model}: output {output!r} holds values outside [0, 1] (from "
                f"{np.nanmin(predicted):.3g} to {np.nanmax(predicted):.3g}) on the first rows of "
                f"{files.data[0]}: the log loss reads probabilities; end the network with "
                "Softmax (or Sigmoid), not LogSoftmax or raw scores"
            )
    elif width != (y.shape[1] if y.ndim == 2 else 1):
        labels = y.ndim == 1 and np.array_equal(y, np.round(y)) and width == len(np.unique(y))
        raise OrtBenchError(
            f"{files.data[0]}: the target has {plural(y.shape[1] if y.ndim == 2 else 1, 'column')}, "
            f"output {output!r} of {files.model} has {width}"
            + (f": for {width} class labels, give --loss log" if labels else "")
        )


def mlp_layers(model: onnx.ModelProto) -> tuple[list, list, str, str] | None:
    """The layers of a graph that is an MLP, or None.

    Follows the trained output back to the input through Add(MatMul(x, W), b) layers, or
    Gemm(x, W, b) ones as torch's Linear exports (``transB``, alpha and beta 1), with one
    hidden activation (Relu, Tanh or Sigmoid, or none), an optional Sigmoid or Softmax on
    the output and skl2onnx's binary ``[1 - p, p]`` columns. Every trainable weight must
    be one of the layers'.

    Returns
    -------
    tuple or None
        Coefficients (in, out) and intercepts (out,) per layer, the hidden activation
        and the output activation, in scikit-learn's names.
    """
    producers = {o: n for n in model.graph.node for o in n.output}
    values = get_initializers(model)

    def back(name: str):
        node = producers.get(name)
        while node is not None and node.op_type in _PASS_THROUGH:
            name = node.input[0]
            node = producers.get(name)
        return name, node

    name, node = back(training_output(model))
    if node is not None and node.op_type == "Concat" and len(node.input) == 2:
        first = producers.get(node.input[0])
        if first is None or first.op_type != "Sub" or first.input[1] != node.input[1]:
            return None
        name, node = back(node.input[1])
    out_activation = "identity"
    if node is not None and node.op_type in ("Sigmoid", "Softmax"):
        out_activation = "logistic" if node.op_type == "Sigmoid" else "softmax"
        name, node = back(node.input[0])
    coefs, intercepts, activations, used = [], [], [], set()
    while node is not None:
        if node.op_type == "Gemm":
            layer = _gemm_layer(node, values)
            if layer is None:
                return None
            coefs.append(layer[0])
            intercepts.append(layer[1])
            used |= set(node.input[1:])
            name, node = back(node.input[0])
        elif node.op_type == "Add":
            bias = [i for i in node.input if i in values]
            if len(bias) != 1:
                return None
            name, matmul = back(node.input[1 - list(node.input).index(bias[0])])
            if matmul is None or matmul.op_type != "MatMul" or matmul.input[1] not in values:
                return None
            coefs.append(values[matmul.input[1]])
            intercepts.append(values[bias[0]].ravel())
            used |= {matmul.input[1], bias[0]}
            name, node = back(matmul.input[0])
        else:
            return None
        if node is not None and node.op_type in _HIDDEN_ACTIVATIONS:
            activations.append(_HIDDEN_ACTIVATIONS[node.op_type])
            name, node = back(node.input[0])
        elif node is not None:
            activations.append("identity")
    if not coefs or len(set(activations)) > 1 or name not in {i.name for i in model.graph.input}:
        return None
    if set(check_weight_names(model, None)) != used:
        return None
    coefs, intercepts = coefs[::-1], intercepts[::-1]
    for k, (coef, intercept) in enumerate(zip(coefs, intercepts)):
        if coef.ndim != 2 or intercept.shape != (coef.shape[1],):
            return None
        if k and coefs[k - 1].shape[1] != coef.shape[0]:
            return None
    return coefs, intercepts, activations[0] if activations else "relu", out_activation


def _gemm_layer(node: onnx.NodeProto, values: dict) -> tuple | None:
    """A Gemm's coefficients (in, out) and intercepts (out,), where it is a plain layer:
    weights and bias initializers, no transposed input, alpha and beta 1."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if len(node.input) != 3 or not all(i in values for i in node.input[1:]):
        return None
    if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1 or attrs.get("beta", 1.0) != 1:
        return None
    coef = values[node.input[1]]
    return (coef.T if attrs.get("transB", 0) else coef), values[node.input[2]].ravel()


def _reference(model, data, task: str, seed: int) -> MLPRegressor | MLPClassifier | None:
    """A scikit-learn MLP holding the graph's weights, or None when the graph is not one."""
    layers = mlp_layers(model)
    if layers is None:
        return None
    coefs, intercepts, activation, out_activation = layers
    hidden = tuple(coef.shape[1] for coef in coefs[:-1])
    reference = reference_mlp(hidden, activation, task, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference.fit(data.X_train, data.y_train, data.w_train)
    if reference.out_activation_ != out_activation or any(
        a.shape != b.shape for a, b in zip(reference.coefs_, coefs)
    ):
        return None
    dtype = reference.coefs_[0].dtype
    reference.coefs_ = [c.astype(dtype) for c in coefs]
    reference.intercepts_ = [b.astype(dtype) for b in intercepts]
    return reference
