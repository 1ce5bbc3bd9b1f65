"""Contenders over PyTorch (optional: torch is imported only when one of them runs)."""

from __future__ import annotations

import importlib
import importlib.util

import numpy as np

from ..problems import Problem
from .base import Contender
from .scikit_learn import inexpressible

#: scikit-learn's activation names -> torch.nn module names
_ACTIVATIONS = {"relu": "ReLU", "tanh": "Tanh", "logistic": "Sigmoid", "identity": "Identity"}


def _torch():
    return importlib.import_module("torch")


class TorchSGD(Contender):
    """The problem's network in ``torch.nn``, trained by ``torch.optim.SGD`` in a plain loop.

    Same layers, activations, initial weights, batches and loss convention as the other
    contenders: 0.5 * squared error summed over outputs and averaged over the batch (or
    weighted by the sample weights), the log loss of a sigmoid output for binary
    problems, of a softmax output for multiclass ones.
    """

    name = "torch-sgd"
    nesterov = False

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed"
        reason = inexpressible(problem, "torch")
        if reason:
            return reason
        if device != "cpu" and not _torch().cuda.is_available():
            return "torch sees no CUDA device"
        return None

    def _network(self):
        torch = _torch()
        coefs, intercepts = self.problem.initial_weights()
        activation = getattr(torch.nn, _ACTIVATIONS[self.problem.reference.activation])
        layers = []
        for k, (coef, intercept) in enumerate(zip(coefs, intercepts)):
            linear = torch.nn.Linear(*coef.shape)
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(np.ascontiguousarray(coef.T)))
                linear.bias.copy_(torch.from_numpy(intercept))
            layers.append(linear)
            if k < len(coefs) - 1:
                layers.append(activation())
        return torch.nn.Sequential(*layers).to(self.device)

    def _fit(self, epochs: int) -> list[float]:
        torch = _torch()
        data = self.problem.data
        self.network = self._network()
        momentum = self.problem.momentum if self.nesterov else 0.0
        self.optimizer = torch.optim.SGD(
            self.network.parameters(),
            lr=self.problem.eta0,
            momentum=momentum,
            nesterov=self.nesterov,
        )
        self._X = torch.from_numpy(np.array(data.X_train)).to(self.device)
        if self.problem.task == "multiclass":
            y = np.searchsorted(self.problem.classes, data.y_train)
        elif self.problem.task == "binary":
            y = (data.y_train == self.problem.classes[1]).astype(np.float32).reshape(-1, 1)
        else:
            y = np.array(data.y_train, dtype=np.float32).reshape(len(data.y_train), -1)
        self._y = torch.from_numpy(y).to(self.device)
        w = data.w_train
        self._w = None if w is None else torch.from_numpy(np.array(w)).to(self.device)
        self._rng = np.random.RandomState(self.problem.seed)
        return [self._epoch() for _ in range(epochs)]

    def _continue(self, epochs: int) -> None:
        for _ in range(epochs):
            self._epoch()

    def _loss(self, output, expected, weight):
        functional = _torch().nn.functional
        if self.problem.task == "binary":
            rows = functional.binary_cross_entropy_with_logits(
                output, expected, reduction="none"
            ).sum(dim=1)
        elif self.problem.task == "multiclass":
            rows = functional.cross_entropy(output, expected, reduction="none")
        else:
            rows = 0.5 * ((output - expected) ** 2).sum(dim=1)
        return rows.mean() if weight is None else (rows * weight).sum() / weight.sum()

    def _epoch(self) -> float:
        torch = _torch()
        n = len(self._X)
        order = self._rng.permutation(n) if self.shuffle else np.arange(n)
        order = torch.from_numpy(order).to(self.device)
        total = 0.0
        for start in range(0, n, self.batch_size):
            rows = order[start : start + self.batch_size]
            self.optimizer.zero_grad()
            weight = None if self._w is None else self._w[rows]
            loss = self._loss(self.network(self._X[rows]), self._y[rows], weight)
            loss.backward()
            self.optimizer.step()
            total += loss.item() * len(rows)
        return total / n

    def predict(self, X: np.ndarray) -> np.ndarray:
        torch = _torch()
        network = getattr(self, "network", None) or self._network()
        with torch.no_grad():
            output = network(torch.from_numpy(np.array(X, dtype=np.float32)).to(self.device))
            if self.problem.task == "binary":
                output = torch.sigmoid(output)
            elif self.problem.task == "multiclass":
                output = torch.softmax(output, dim=1)
        output = output.cpu().numpy()
        return output if output.shape[1] > 1 else output.ravel()


class TorchNesterov(TorchSGD):
    """The same with momentum 0.9, Nesterov's."""

    name = "torch-nesterov"
    nesterov = True
