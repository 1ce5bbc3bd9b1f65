"""Contenders over PyTorch (optional: torch is imported only when one of them runs).

They train the problem's own ONNX graph, run by :class:`ortbench.torch_graph.TorchGraph`:
every node a torch operation, the weights to train torch parameters holding the graph's
initial values. Whatever the network (an MLP, a CNN, an attention block), torch trains
exactly what the engine trains, from the same weights, with the same loss and batches.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache

import numpy as np

from ...install import TORCH_INSTALL
from ...training import OrtBenchError
from ...training.steps.batches import RowOrder
from ..problems import Problem
from .base import Contender, as_prediction
from .graph_plan import GraphPlan, graph_plan, targets


def _torch():
    return importlib.import_module("torch")


@cache
def _plan(problem: Problem) -> GraphPlan | str:
    """The problem's plan, or why torch cannot run its graph: an operator the runner
    lacks, or a node it refuses in the form the graph has it (found by running the graph
    on two rows)."""
    plan = graph_plan(problem)
    if isinstance(plan, str):
        return plan
    runner = importlib.import_module("ortbench.torch_graph")
    reason = runner.unsupported(plan.model, [plan.scores])
    if reason is None:
        try:
            rows = _torch().tensor(problem.data.X_train[:2])  # a copy: the data is read-only
            runner.TorchGraph(plan.model, [plan.scores])(rows)
        except OrtBenchError as e:
            reason = str(e)
    return reason or plan


class TorchSGD(Contender):
    """The problem's graph run by torch, trained by ``torch.optim.SGD`` in a plain loop.

    Same network, initial weights, batches and loss convention as the other contenders:
    0.5 * squared error (or the absolute error) summed over outputs and averaged over the
    batch (or weighted by the sample weights); for classifiers the log loss of the
    Sigmoid or Softmax the graph applies to its scores, or of its probabilities clipped
    to [eps, 1 - eps].
    """

    name = "torch-sgd"
    nesterov = False

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        if importlib.util.find_spec("torch") is None:
            return f"needs torch: {TORCH_INSTALL}"
        if device != "cpu" and not _torch().cuda.is_available():
            return "torch sees no CUDA device"
        plan = _plan(problem)
        return plan if isinstance(plan, str) else None

    def _network(self):
        plan = _plan(self.problem)
        runner = importlib.import_module("ortbench.torch_graph").TorchGraph
        return runner(plan.model, [plan.scores], plan.weights, self.device)

    def _fit(self, epochs: int) -> list[float]:
        torch = _torch()
        data = self.problem.data
        self._learning_loss = _plan(self.problem).learning_loss(self.problem)
        self.network = self._network()
        momentum = self.problem.momentum if self.nesterov else 0.0
        self.optimizer = torch.optim.SGD(
            self.network.parameters(),
            lr=self.problem.eta0,
            momentum=momentum,
            nesterov=self.nesterov,
        )
        self._X = torch.from_numpy(np.array(data.X_train)).to(self.device)
        with torch.no_grad():
            width = self.network(self._X[:1])[0].shape[1]
        self._y = torch.from_numpy(targets(self.problem, data.y_train, width)).to(self.device)
        w = data.w_train
        self._w = None if w is None else torch.from_numpy(np.array(w)).to(self.device)
        self._rows = RowOrder(self.problem.seed)
        return [self._epoch() for _ in range(epochs)]

    def _continue(self, epochs: int) -> None:
        for _ in range(epochs):
            self._epoch()

    def _loss(self, output, expected, weight):
        rows = self._learning_loss.torch_rows(output, expected)
        return rows.mean() if weight is None else (rows * weight).sum() / weight.sum()

    def _epoch(self) -> float:
        torch = _torch()
        n = len(self._X)
        order = self._rows.next(n) if self.shuffle else np.arange(n)
        order = torch.from_numpy(order).to(self.device)
        # the losses add up on the device, read once per epoch as the other contenders do:
        # a read per step would wait for each step's kernels before queueing the next
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for start in range(0, n, self.batch_size):
            rows = order[start : start + self.batch_size]
            self.optimizer.zero_grad()
            weight = None if self._w is None else self._w[rows]
            loss = self._loss(self.network(self._X[rows])[0], self._y[rows], weight)
            loss.backward()
            self.optimizer.step()
            total.add_(loss.detach(), alpha=len(rows))
        return total.item() / n

    def predict(self, X: np.ndarray) -> np.ndarray:
        torch = _torch()
        network = getattr(self, "network", None) or self._network()
        function = _plan(self.problem).function
        with torch.no_grad():
            output = network(torch.from_numpy(np.array(X, dtype=np.float32)).to(self.device))[0]
            if function == "sigmoid":
                output = torch.sigmoid(output)
            elif function == "softmax":
                output = torch.softmax(output, dim=1)
        return as_prediction(output.cpu().numpy(), self.problem.loss_name == "log")


class TorchNesterov(TorchSGD):
    """The same with momentum 0.9, Nesterov's."""

    name = "torch-nesterov"
    nesterov = True
