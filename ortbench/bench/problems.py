"""Problems: a model, a data set, a loss and the initial weights every contender starts from.

A built-in problem's initial weights come from one scikit-learn reference model: an MLP
fitted for one SGD epoch from a fixed seed. scikit-learn contenders start from a copy of
it, onnxruntime contenders from its ONNX conversion, torch contenders from its weights,
so on one problem every contender trains the same function from the same point with the
same loss. Built-in MLP problems take their hidden layers from their name
(``mlp-256-128``: two hidden layers of 256 and 128 units; ``mlp``: the default 50, 10).
The network problems ``cnn`` and ``transformer`` (:mod:`ortbench.bench.networks`) train
on the digit images, with weights drawn from the seed: scikit-learn cannot express them,
torch runs their graph.

A user's own model and data become a problem through :mod:`ortbench.bench.user_model`,
which registers it here under its file names; it has a reference only when its graph is
an MLP scikit-learn and torch can express.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np
import onnx
from skl2onnx import to_onnx
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score, r2_score
from sklearn.neural_network import MLPClassifier, MLPRegressor

from ..training import OrtBenchError
from ..training.graphs.nodes import rewrite_linear_nodes
from ..training.graphs.weights import check_weight_names, get_initializers
from ..training.losses import loss_from_name
from .datasets import DATASETS, GENERATED, VALIDATION_FRACTION, Split, load_split
from .networks import NETWORKS

#: name -> (default hidden layer sizes, task)
_MODELS = {
    "linear": ((), "regression"),
    "mlp": ((50, 10), "regression"),
    "mlp-binary": ((50, 10), "binary"),
    "mlp-multiclass": ((50, 10), "multiclass"),
    **{name: ((), "multiclass") for name in NETWORKS},
}
PROBLEMS = tuple(_MODELS)
#: The data sets the network problems read: 8x8 digit images, one row each; the first is
#: their default (five times the shipped rows, so that batches of 256 run).
IMAGES = ("digits_shifted", "digits")

#: Learning rate (constant) and momentum shared by every contender.
ETA0 = 0.001
MOMENTUM = 0.9
#: The network problems' learning rate: at ETA0 their loss hardly moves in a few epochs.
NETWORK_ETA0 = 0.05


_SIZED = re.compile(r"^(?P<base>[a-z-]+?)((?:-\d+)+)$")

#: Problems made from a user's files, by (name, data set name).
_REGISTERED: dict[tuple[str, str], Problem] = {}


@dataclass(frozen=True, eq=False)
class Problem:
    """One model to train on one data set, and how to score it.

    ``loss_name`` is the engine's name of the training loss ('squared_error',
    'absolute_error' or 'log'); ``weights`` the initializers to train (None: the
    trainers' own choice); ``reference`` the scikit-learn MLP holding the initial
    weights, None when scikit-learn cannot express the model.
    """

    name: str
    dataset: str
    task: str
    data: Split
    onnx_model: onnx.ModelProto
    seed: int
    reference: MLPRegressor | MLPClassifier | None = None
    loss_name: str = "squared_error"
    weights: tuple[str, ...] | None = None
    eta0: float = ETA0
    momentum: float = MOMENTUM

    @property
    def hidden(self) -> tuple[int, ...] | None:
        """The reference MLP's hidden layer sizes (None without a reference)."""
        if self.reference is None:
            return None
        return tuple(coef.shape[1] for coef in self.reference.coefs_[:-1])

    @property
    def is_linear(self) -> bool:
        """True when the model is an MLP without hidden layer."""
        return self.hidden == ()

    @cached_property
    def trained_values(self) -> int:
        """How many values a step trains: the sizes of the weights the trainers train."""
        model = rewrite_linear_nodes(self.onnx_model)
        names = check_weight_names(model, list(self.weights) if self.weights else None)
        return int(sum(value.size for value in get_initializers(model, names).values()))

    def initial_weights(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Copies of the reference's layer coefficients and intercepts (scikit-learn layout)."""
        if self.reference is None:
            raise OrtBenchError(f"{self.name} is not an MLP: it has no layer weights")
        return (
            [c.astype(np.float32) for c in self.reference.coefs_],
            [b.astype(np.float32) for b in self.reference.intercepts_],
        )

    def steps_per_epoch(self, batch_size: int) -> int:
        return -(-len(self.data.X_train) // batch_size)

    @property
    def classes(self) -> np.ndarray:
        """The training labels' classes, sorted (classification problems)."""
        return np.unique(self.data.y_train)

    def loss(self, y: np.ndarray, output: np.ndarray, sample_weight=None) -> float:
        """The training loss of ``output``, averaged over rows (weighted by ``sample_weight``).

        ``output`` holds values for regression, P(class 1) (one column) or class
        probabilities for classification. 0.5 * squared error summed over outputs
        (scikit-learn's MLP loss), the absolute error summed over outputs, or the log loss:
        the loss of :data:`~ortbench.training.losses.LOSSES` named ``loss_name``.
        """
        output = np.asarray(output, dtype=np.float64)
        y = np.asarray(y)
        if self.loss_name == "log":
            if output.ndim == 1:  # P(class 1) of a binary classifier
                output = np.column_stack([1 - output, output])
            expected = np.eye(output.shape[1])[np.searchsorted(self.classes, y)]
        else:
            output = output.reshape(len(y), -1)
            expected = y.astype(np.float64).reshape(len(y), -1)
        per_row = loss_from_name(self.loss_name).numpy_rows(output, expected)
        return float(np.average(per_row, weights=sample_weight))

    def score(self, y: np.ndarray, output: np.ndarray) -> float:
        """Accuracy for classification, R2 for regression."""
        output = np.asarray(output)
        if self.loss_name == "log":
            index = (output > 0.5).astype(np.int64) if output.ndim == 1 else output.argmax(1)
            return float(accuracy_score(y, self.classes[index]))
        return float(r2_score(y, output.reshape(np.shape(y))))


def problem_name(base: str, hidden: tuple[int, ...] | None) -> str:
    """The name of built-in problem ``base`` with these hidden layers.

    Parameters
    ----------
    base : str
        One of :data:`PROBLEMS`.
    hidden : tuple of int or None
        Hidden layer sizes (None: the default).

    Returns
    -------
    str
        ``mlp-256-128`` for ``('mlp', (256, 128))``; ``base`` itself for its default sizes
        and for the linear problem.

    Raises
    ------
    OrtBenchError
        For an unknown problem.
    """
    if base not in _MODELS:
        raise OrtBenchError(f"unknown problem {base!r}: expected one of {list(PROBLEMS)}")
    if hidden is None or not _MODELS[base][0] or tuple(hidden) == _MODELS[base][0]:
        return base
    return "-".join([base, *map(str, hidden)])


def has_hidden_layers(name: str) -> bool:
    """Whether built-in problem ``name`` (sized or not) is an MLP, whose hidden layers
    ``--hidden`` sets (the linear and network problems have fixed layers).

    Raises
    ------
    OrtBenchError
        For an unknown problem.
    """
    return bool(_MODELS[parse_problem_name(name)[0]][0])


def sized_problems(
    problems: tuple[str, ...], hidden: tuple[tuple[int, ...], ...]
) -> tuple[str, ...]:
    """Every built-in problem of ``problems`` at every size of ``hidden``.

    Parameters
    ----------
    problems : tuple of str
        Problem names (sized or not: their base problem is taken).
    hidden : tuple of tuple of int
        Hidden layer sizes.

    Returns
    -------
    tuple of str
        The sized names, in order, without repeats (the linear problem once).

    Raises
    ------
    OrtBenchError
        For an unknown problem.
    """
    names = [problem_name(parse_problem_name(p)[0], h) for p in problems for h in hidden]
    return tuple(dict.fromkeys(names))


def parse_hidden(values: list[str]) -> tuple[tuple[int, ...], ...]:
    """Hidden layer sizes from the command line.

    Parameters
    ----------
    values : list of str
        One model size per value, layer sizes joined by commas: ``['50,10', '256,128']``.

    Returns
    -------
    tuple of tuple of int
        ``((50, 10), (256, 128))``.

    Raises
    ------
    OrtBenchError
        For a value that is not integers >= 1 joined by commas.
    """
    sizes = []
    for value in values:
        try:
            size = tuple(int(v) for v in value.split(","))
        except ValueError:
            size = ()
        if not size or any(v < 1 for v in size):
            raise OrtBenchError(
                f"--hidden {value!r}: give layer sizes as integers >= 1 joined by commas (256,128)"
            )
        sizes.append(size)
    return tuple(sizes)


def parse_problem_name(name: str) -> tuple[str, tuple[int, ...]]:
    """The built-in problem and hidden layers a name stands for (see :func:`problem_name`).

    Raises
    ------
    OrtBenchError
        For a name that is neither a built-in problem nor a sized MLP problem.
    """
    if name in _MODELS:
        return name, _MODELS[name][0]
    sized = _SIZED.match(name)
    if sized and sized["base"] in _MODELS and _MODELS[sized["base"]][0]:
        hidden = tuple(int(v) for v in name[len(sized["base"]) + 1 :].split("-"))
        if all(h >= 1 for h in hidden):
            return sized["base"], hidden
    raise OrtBenchError(
        f"unknown problem {name!r}: expected one of {list(PROBLEMS)}, an MLP one with its "
        "hidden layers (mlp-256-128) or a registered model file"
    )


def register(problem: Problem) -> Problem:
    """Make ``make_problem(problem.name, problem.dataset)`` return ``problem``."""
    _REGISTERED[problem.name, problem.dataset] = problem
    return problem


def problem_task(name: str) -> str | None:
    """The task (regression, binary, multiclass) of a problem by its name; None for a
    name neither built in nor registered in this process."""
    registered = {p.task for (n, _), p in _REGISTERED.items() if n == name}
    if len(registered) == 1:
        return registered.pop()
    try:
        return _MODELS[parse_problem_name(name)[0]][1]
    except OrtBenchError:
        return None


def is_registered(name: str, dataset: str) -> bool:
    """True when (name, dataset) is a problem made from a user's files."""
    return (name, dataset) in _REGISTERED


def check_problems(problems: tuple[str, ...], datasets: tuple[str, ...]) -> None:
    """Raise a one-line error unless every problem runs on every data set: built-in
    (sized) problems on built-in data sets, or a registered problem on its own data."""
    if not problems or not datasets:
        raise OrtBenchError("no problems or no datasets to run")
    for name in problems:
        for dataset in datasets:
            if is_registered(name, dataset):
                continue
            base = parse_problem_name(name)[0]
            if base in NETWORKS and dataset not in IMAGES:
                raise OrtBenchError(
                    f"problem {name!r} reads 8x8 digit images: run it on --dataset "
                    f"{' or '.join(IMAGES)}"
                )
            if dataset not in DATASETS:
                raise OrtBenchError(
                    f"unknown datasets [{dataset!r}]: expected some of {list(DATASETS)}"
                )


#: Full batches every timed epoch holds, so that no time per step is mostly padding or
#: per-epoch work: a generated data set grows to hold them (:func:`batch_data_sizes`).
MIN_BATCHES = 8


def batch_data_sizes(
    name: str,
    dataset: str,
    batch_size: int,
    n_samples: int | None = None,
    n_features: int | None = None,
) -> dict[str, int | None]:
    """The ``n_samples`` and ``n_features`` to make problem ``name`` with at ``batch_size``:
    those given, but a generated data set grows until its training split holds
    :data:`MIN_BATCHES` full batches (a shipped one keeps its rows).

    Returns
    -------
    dict
        Keyword arguments of :func:`make_problem`.
    """
    sizes = {"n_samples": n_samples, "n_features": n_features}
    problem = make_problem(name, dataset, **sizes)
    if dataset in GENERATED and len(problem.data.X_train) < MIN_BATCHES * batch_size:
        sizes["n_samples"] = rows_for_batches(batch_size)
    return sizes


def rows_for_batches(batch_size: int) -> int:
    """The fewest rows whose training split holds :data:`MIN_BATCHES` full batches of
    ``batch_size`` once :data:`~ortbench.bench.datasets.VALIDATION_FRACTION` of them are
    held out."""
    return math.ceil(MIN_BATCHES * batch_size / (1 - VALIDATION_FRACTION))


def batch_too_large(problem: Problem, batch_size: int) -> str | None:
    """Why an epoch of the problem's training rows is no epoch to time at ``batch_size``
    (it would not hold :data:`MIN_BATCHES` full batches), and what to change; None when
    it is.

    Parameters
    ----------
    problem : Problem
        The cell's problem, on the data the cell trains on (see :func:`batch_data_sizes`).
    batch_size : int
        The cell's batch size.

    Returns
    -------
    str or None
        One line: the largest batch size these rows allow, and the rows this one needs.
    """
    rows = len(problem.data.X_train)
    if rows >= MIN_BATCHES * batch_size:
        return None
    largest = rows // MIN_BATCHES
    usable = f"batch sizes up to {largest} run on them" if largest else "no batch size runs on them"
    return (
        f"batch size {batch_size} is more than an eighth of the {rows} training rows of "
        f"{problem.dataset}: an epoch would not hold {MIN_BATCHES} full batches; {usable}, "
        f"and batch size {batch_size} needs data of {rows_for_batches(batch_size)} rows "
        f"({VALIDATION_FRACTION:.0%} are held out)"
    )


def make_problem(
    name: str,
    dataset: str = "make_regression",
    n_samples: int | None = None,
    seed: int = 0,
    n_features: int | None = None,
) -> Problem:
    """Problem ``name`` on ``dataset``: a registered user problem, or a built-in one
    built once per process.

    Parameters
    ----------
    name : str
        One of :data:`PROBLEMS`, a sized MLP name (``mlp-256-128``) or a registered name.
    dataset : str
        A data set of :mod:`ortbench.bench.datasets` (or the registered one).
    n_samples, n_features : int, optional
        The data set's size (see :func:`~ortbench.bench.datasets.load_split`).
    seed : int
        Seed of the data and of the reference model's first epoch.

    Returns
    -------
    Problem

    Raises
    ------
    OrtBenchError
        For an unknown problem or data set.
    """
    registered = _REGISTERED.get((name, dataset))
    if registered is not None:
        return registered
    return _builtin_problem(name, dataset, n_samples, seed, n_features)


@cache
def _builtin_problem(
    name: str, dataset: str, n_samples: int | None, seed: int, n_features: int | None
) -> Problem:
    base, hidden = parse_problem_name(name)
    task = _MODELS[base][1]
    data = load_split(dataset, task, n_samples=n_samples, seed=seed, n_features=n_features)
    if base in NETWORKS:  # no scikit-learn reference: its weights are drawn from the seed
        if dataset not in IMAGES:
            raise OrtBenchError(f"problem {name!r} reads 8x8 digit images, not {dataset!r}")
        network = NETWORKS[base](len(np.unique(data.y_train)), seed)
        return Problem(name, dataset, task, data, network, seed, None, "log", eta0=NETWORK_ETA0)
    if task == "multiclass" and len(np.unique(data.y_train)) == 2:
        task = "binary"  # what scikit-learn and torch train then: one logistic output
    model = reference_mlp(hidden, "relu", task, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(data.X_train, data.y_train)
    options = {"zipmap": False} if task != "regression" else None
    onx = to_onnx(model, data.X_train[:1], options=options)
    loss = "squared_error" if task == "regression" else "log"
    return Problem(name, dataset, task, data, onx, seed, model, loss)


def default_datasets(problems: tuple[str, ...]) -> tuple[str, ...] | None:
    """The data sets to run problems on when none is named: the shifted digit images when
    every problem is a network problem (None: the bench's own default)."""
    if problems and all(parse_problem_name(p)[0] in NETWORKS for p in problems):
        return IMAGES[:1]
    return None


def reference_mlp(
    hidden: tuple[int, ...], activation: str, task: str, seed: int
) -> MLPRegressor | MLPClassifier:
    """An unfitted scikit-learn MLP with the SGD settings every contender shares."""
    settings = dict(
        hidden_layer_sizes=hidden,
        activation=activation,
        solver="sgd",
        learning_rate="constant",
        learning_rate_init=ETA0,
        momentum=0.0,
        alpha=0.0,
        max_iter=1,
        random_state=seed,
    )
    return MLPRegressor(**settings) if task == "regression" else MLPClassifier(**settings)
