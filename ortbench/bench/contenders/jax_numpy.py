"""Contenders over JAX (optional: jax is imported only when one of them runs).

A problem's scikit-learn MLP is written in ``jax.numpy`` and trained with scikit-learn's
conventions (``SGDOptimizer``): the loss of a batch is its mean row loss plus
``0.5 * alpha * sum(W^2) / n_batch`` on the coefficients; an 'invscaling' rate changes once
per epoch to ``lr0 / (t + 1) ** power_t`` with ``t`` the samples seen. A graph scikit-learn
cannot express (the ``cnn`` and ``transformer`` problems, a user's model) is run by
:class:`ortbench.jax_graph.JaxGraph` and trained as the torch contenders train it: its
loss averaged over the batch (or weighted by the sample weights), no penalty, a constant
rate. Both update alike: plain SGD moves a weight by ``-lr * g``; with Nesterov's momentum
``m`` the velocity is ``v = m * v - lr * g`` and a weight moves by ``m * v - lr * g``.
The jitted functions are compiled by the first epoch of ``fit``: the timed fits
(``continue_fit``) reuse them.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings

import numpy as np

from ...errors import OrtBenchError
from ...install import JAX_INSTALL
from ...training.steps.batches import RowOrder
from ..problems import Problem
from .base import Contender, as_prediction
from .graph_plan import graph_plan, targets
from .scikit_learn import inexpressible

#: JAX's name of the platform each ortbench device runs on
_PLATFORMS = {"cpu": "cpu", "cuda": "gpu"}


def _jax():
    return importlib.import_module("jax")


def _activation(name: str):
    jax = _jax()
    return {
        "relu": jax.nn.relu,
        "tanh": jax.numpy.tanh,
        "logistic": jax.nn.sigmoid,
        "identity": lambda a: a,
    }[name]


def _mlp_loss(problem: Problem):
    """The batch loss ``(weights, X, y, w) -> loss`` of the problem's MLP, scikit-learn's
    (weights: ``(coefficients, intercepts)``)."""
    jax = _jax()
    jnp = jax.numpy
    activation = _activation(problem.reference.activation)
    alpha = float(problem.reference.alpha)
    task = problem.task

    def loss(weights, X, y, w):
        coefs, intercepts = weights
        out = X
        for k, (coef, intercept) in enumerate(zip(coefs, intercepts)):
            out = out @ coef + intercept
            if k < len(coefs) - 1:
                out = activation(out)
        if task == "binary":
            rows = -(y * jax.nn.log_sigmoid(out) + (1 - y) * jax.nn.log_sigmoid(-out)).sum(1)
        elif task == "multiclass":
            rows = -jnp.take_along_axis(jax.nn.log_softmax(out), y[:, None], axis=1)[:, 0]
        else:
            rows = 0.5 * ((out - y) ** 2).sum(1)
        total = rows.sum() if w is None else (rows * w).sum()
        n = rows.shape[0] if w is None else w.sum()
        penalty = 0.5 * alpha * sum((coef**2).sum() for coef in weights[0])
        return (total + penalty) / n

    return loss


def _graph_loss(problem: Problem, network):
    """The batch loss ``(weights, X, y, w) -> loss`` of the problem's graph run by
    ``network`` (a :class:`~ortbench.jax_graph.JaxGraph`; weights in its trained order)."""
    learning_loss = graph_plan(problem).learning_loss(problem)

    def loss(weights, X, y, w):
        rows = learning_loss.jax_rows(network.apply(weights, X)[0], y)
        return rows.mean() if w is None else (rows * w).sum() / w.sum()

    return loss


def _build_step(loss, momentum: float):
    """The pure training step ``(weights, velocities, X, y, w, rows, lr) -> (weights,
    velocities, loss)`` of the batch ``loss`` on rows ``rows``; the loss returned is the
    batch's loss before the update times its number of rows. ``momentum`` 0 is plain SGD
    (velocities are then ()), else Nesterov's momentum."""
    jax = _jax()

    def step(weights, velocities, X, y, w, rows, lr):
        value, grads = jax.value_and_grad(loss)(
            weights, X[rows], y[rows], None if w is None else w[rows]
        )
        value = value * rows.shape[0]
        if momentum == 0.0:
            weights = jax.tree.map(lambda p, g: p - lr * g, weights, grads)
            return weights, velocities, value
        velocities = jax.tree.map(lambda v, g: momentum * v - lr * g, velocities, grads)
        weights = jax.tree.map(
            lambda p, v, g: p + momentum * v - lr * g, weights, velocities, grads
        )
        return weights, velocities, value

    return step


def _graph_reason(problem: Problem) -> str | None:
    """Why jax cannot run the problem's graph, or None: an operator the runner lacks, or
    a node it refuses in the form the graph has it (found by running the graph on two
    rows, as the torch contenders do)."""
    plan = graph_plan(problem)
    if isinstance(plan, str):
        return plan
    runner = importlib.import_module("ortbench.jax_graph")
    reason = runner.unsupported(plan.model, [plan.scores])
    if reason is None:
        try:
            network = runner.JaxGraph(plan.model, [plan.scores], plan.weights)
            network.apply(network.initial, np.asarray(problem.data.X_train[:2]))
        except OrtBenchError as e:
            reason = str(e)
    return reason


def _network(problem: Problem):
    """The problem's graph as a :class:`~ortbench.jax_graph.JaxGraph` of its scores."""
    plan = graph_plan(problem)
    runner = importlib.import_module("ortbench.jax_graph").JaxGraph
    return runner(plan.model, [plan.scores], plan.weights)


class JaxSGD(Contender):
    """The problem's MLP in ``jax.numpy`` (or its graph run by JAX), one jitted step per
    batch, its weights donated.

    Same network, initial weights, batches and loss as the other contenders; the
    conventions are in the module's notes.
    """

    name = "jax-sgd"
    nesterov = False

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        if importlib.util.find_spec("jax") is None:
            return f"needs jax: {JAX_INSTALL}"
        reason = inexpressible(problem, "jax") if problem.reference else _graph_reason(problem)
        if reason:
            return reason
        if device not in _PLATFORMS:
            return f"jax does not train on {device}"
        try:
            _jax().devices(_PLATFORMS[device])
        except RuntimeError:
            return f"jax sees no {device} device"
        return None

    def _stage(self) -> None:
        """Put the data set and the initial weights on the device; compile nothing yet."""
        jax = _jax()
        problem, data = self.problem, self.problem.data
        self._device = jax.devices(_PLATFORMS[self.device])[0]
        put = lambda a: jax.device_put(np.ascontiguousarray(a), self._device)  # noqa: E731
        momentum = problem.momentum if self.nesterov else 0.0
        self._X = put(np.asarray(data.X_train, dtype=np.float32))
        if problem.reference is not None:
            coefs, intercepts = problem.initial_weights()
            self._weights = (tuple(put(c) for c in coefs), tuple(put(b) for b in intercepts))
            if problem.task == "multiclass":
                y = np.searchsorted(problem.classes, data.y_train).astype(np.int32)
            elif problem.task == "binary":
                y = (data.y_train == problem.classes[1]).astype(np.float32).reshape(-1, 1)
            else:
                y = np.asarray(data.y_train, dtype=np.float32).reshape(len(data.y_train), -1)
            loss = _mlp_loss(problem)
        else:
            self._network = _network(problem)
            self._weights = tuple(put(value) for value in self._network.initial)
            width = jax.eval_shape(self._network.apply, self._weights, self._X[:1])[0].shape[1]
            y = targets(problem, data.y_train, width)
            loss = _graph_loss(problem, self._network)
        zeros = jax.tree.map(lambda p: jax.numpy.zeros_like(p), self._weights)
        self._velocities = zeros if momentum else ()
        self._y = put(y)
        self._w = None if data.w_train is None else put(np.asarray(data.w_train, np.float32))
        step = _build_step(loss, momentum)
        # weights and velocities are replaced by every step: their buffers are reused
        self._step = jax.jit(step, donate_argnums=(0, 1))
        reference = problem.reference  # a graph's rate is constant, as torch's
        self._schedule = reference.learning_rate if reference else "constant"
        self._power_t = float(reference.power_t) if reference else 0.0
        self._seen = int(getattr(reference, "t_", 0))
        self._lr = float(problem.eta0)
        self._rows = RowOrder(problem.seed)

    def _fit(self, epochs: int) -> list[float]:
        self._stage()
        return [self._epoch() for _ in range(epochs)]

    def _continue(self, epochs: int) -> None:
        for _ in range(epochs):
            self._epoch()

    def _order(self) -> np.ndarray:
        n = len(self.problem.data.X_train)
        order = self._rows.next(n) if self.shuffle else np.arange(n)
        return order.astype(np.int32)

    def _epoch(self) -> float:
        order = self._order()
        with warnings.catch_warnings():
            # a backend that cannot reuse a donated buffer says so and copies instead
            warnings.filterwarnings("ignore", "Some donated buffers were not usable")
            losses = self._run_epoch(order)
        self._end_epoch(len(order))
        # one transfer per epoch: the steps run asynchronously until it
        return float(np.sum(_jax().device_get(losses), dtype=np.float64)) / len(order)

    def _run_epoch(self, order: np.ndarray) -> list:
        """Train one epoch on rows ``order``; return the device values of its losses."""
        lr = np.float32(self._lr)
        losses = []
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            self._weights, self._velocities, loss = self._step(
                self._weights, self._velocities, self._X, self._y, self._w, rows, lr
            )
            losses.append(loss)
        return losses

    def _end_epoch(self, n: int) -> None:
        """scikit-learn's per-epoch rate change ('invscaling'; others keep the rate)."""
        self._seen += n
        if self._schedule == "invscaling":
            self._lr = float(self.problem.eta0) / (self._seen + 1) ** self._power_t

    def weights(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The MLP's current coefficients and intercepts (scikit-learn's layout), as numpy
        arrays."""
        if not hasattr(self, "_weights"):
            return self.problem.initial_weights()
        coefs, intercepts = self._weights
        return [np.asarray(c) for c in coefs], [np.asarray(b) for b in intercepts]

    def predict(self, X: np.ndarray) -> np.ndarray:
        a = np.asarray(X, dtype=np.float32)
        if self.problem.reference is None:
            return self._predict_graph(a)
        coefs, intercepts = self.weights()
        activation = self.problem.reference.activation
        for k, (coef, intercept) in enumerate(zip(coefs, intercepts)):
            a = a @ coef + intercept
            if k < len(coefs) - 1:
                a = np.asarray(_activation(activation)(a))
        if self.problem.task == "binary":
            a = 1 / (1 + np.exp(-a))
        elif self.problem.task == "multiclass":
            e = np.exp(a - a.max(axis=1, keepdims=True))
            a = e / e.sum(axis=1, keepdims=True)
        return a if a.shape[1] > 1 else a.ravel()

    def _predict_graph(self, X: np.ndarray) -> np.ndarray:
        """The graph's scores for ``X`` through its probability function, as predicted."""
        jax = _jax()
        network = getattr(self, "_network", None) or _network(self.problem)
        weights = getattr(self, "_weights", network.initial)
        output = network.apply(weights, X)[0]
        function = graph_plan(self.problem).function
        if function == "sigmoid":
            output = jax.nn.sigmoid(output)
        elif function == "softmax":
            output = jax.nn.softmax(output, axis=1)
        return as_prediction(np.asarray(output), self.problem.loss_name == "log")


class JaxNesterov(JaxSGD):
    """The same with momentum 0.9, Nesterov's."""

    name = "jax-nesterov"
    nesterov = True


class JaxScan(JaxSGD):
    """Plain SGD as ``jax-sgd``, one jitted call per epoch: ``lax.scan`` runs the epoch's
    full batches (gathered on the device in the epoch's order), a last partial batch goes
    through the single step."""

    name = "jax-scan"

    def _stage(self) -> None:
        super()._stage()
        jax = _jax()
        step = self._step

        def epoch(weights, velocities, X, y, w, batches, lr):
            def body(state, rows):
                weights, velocities = state
                weights, velocities, loss = step(weights, velocities, X, y, w, rows, lr)
                return (weights, velocities), loss

            (weights, velocities), losses = jax.lax.scan(body, (weights, velocities), batches)
            return weights, velocities, losses.sum()

        self._scan = jax.jit(epoch, donate_argnums=(0, 1))

    def _run_epoch(self, order: np.ndarray) -> list:
        lr = np.float32(self._lr)
        full = len(order) // self.batch_size * self.batch_size
        losses = []
        if full:
            batches = order[:full].reshape(-1, self.batch_size)
            self._weights, self._velocities, loss = self._scan(
                self._weights, self._velocities, self._X, self._y, self._w, batches, lr
            )
            losses.append(loss)
        if full < len(order):
            self._weights, self._velocities, loss = self._step(
                self._weights, self._velocities, self._X, self._y, self._w, order[full:], lr
            )
            losses.append(loss)
        return losses
