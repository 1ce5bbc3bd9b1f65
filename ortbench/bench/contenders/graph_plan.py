"""What a peer library (torch, JAX) trains of a problem's own ONNX graph.

The peers run the graph's nodes with their own operations, so that they train exactly
what the engine trains: the same network, initial weights, batches and loss convention.
This module holds what they share: which tensor the loss reads and through which
function, the weights to train, the targets the loss compares with, and the rows'
weighting.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import onnx

from ...training import OrtBenchError
from ...training.graphs.nodes import rewrite_linear_nodes
from ...training.graphs.outputs import log_loss_output, training_output
from ...training.graphs.recurrent import unroll_recurrent
from ...training.graphs.weights import check_weight_names
from ...training.losses import BaseLearningLoss, NegLogLearningLoss, loss_from_name
from ..problems import Problem


@dataclass(frozen=True)
class GraphPlan:
    """What a peer runs of a problem's graph: the tensor the loss reads, the function that
    turns it into probabilities ('sigmoid', 'softmax'; None: the tensor is the
    prediction itself), and the weights to train."""

    model: onnx.ModelProto
    scores: str
    function: str | None
    weights: tuple[str, ...]

    def learning_loss(self, problem: Problem) -> BaseLearningLoss:
        """The loss of the scores: the problem's, or the log loss through the function."""
        if self.function is None:
            return loss_from_name(problem.loss_name)
        return NegLogLearningLoss(probability_function=self.function)


@cache
def graph_plan(problem: Problem) -> GraphPlan | str:
    """The problem's plan, or why its graph cannot be trained by a peer."""
    try:
        # the runners have no recurrent operator: RNN, LSTM and GRU nodes run unrolled
        model = unroll_recurrent(rewrite_linear_nodes(problem.onnx_model))
        weights = check_weight_names(model, list(problem.weights) if problem.weights else None)
        scores, function = training_output(model), None
        classifier = log_loss_output(model) if problem.loss_name == "log" else None
        if classifier is not None and classifier.function is not None:
            scores, function = classifier.scores, classifier.function
    except OrtBenchError as e:
        return str(e)
    return GraphPlan(model, scores, function, tuple(weights))


def targets(problem: Problem, y: np.ndarray, width: int) -> np.ndarray:
    """The values or one-hot labels the loss compares scores of ``width`` columns with."""
    if problem.loss_name != "log":
        return np.array(y, dtype=np.float32).reshape(len(y), -1)
    index = np.searchsorted(problem.classes, y)
    if width == 1:
        return (index == len(problem.classes) - 1).astype(np.float32).reshape(-1, 1)
    return np.eye(width, dtype=np.float32)[index]
