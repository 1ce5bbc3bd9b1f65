"""What a trainer asks of its step object, the part that runs its training steps.

A trainer chooses one step object per fit build, by trainer and backend:

========================  =====================================  ==========================
trainer                   ``backend='ort-training'``             ``backend='portable'``
========================  =====================================  ==========================
``FullTrainer``           :class:`~.on_device.OnDeviceSteps`     :class:`~.fused.FusedSteps`
``ForwardBackwardTrainer`` :class:`~.agent.AgentSteps`           :class:`~.split.SplitSteps`
========================  =====================================  ==========================

The step object builds its graphs and sessions and owns the weights; once per fit it binds
every run over the staged batches (one record per batch, a named tuple, which its epoch
loop unpacks); then each epoch only runs. Everything else (input checks, batching, the
learning-rate schedule, divergence, validation, predict, export) is the trainer's
(:class:`~ortbench.training.estimators.base.BaseTrainer`).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import numpy as np
import onnx

from .batches import BatchLoader


class Steps(Protocol):
    """The interface every step object has."""

    #: The graphs the steps run, by name (ModelProto or serialized bytes).
    graphs: dict[str, onnx.ModelProto | bytes]
    #: How many sessions run the model's own work (forward, backward) in turn in each
    #: step, each on its own intra-op pool (the trainers' thread policy depends on it).
    large_sessions: ClassVar[int]

    def set_learning_rate(self, value: float) -> None:
        """Make the next steps use the learning rate ``value``."""

    def start_fit(self, loader: BatchLoader) -> None:
        """Bind every run over the loader's staged batches (once per staged loader)."""

    def run_epoch(self) -> float:
        """Train on every staged batch; return the epoch's loss (mean over samples)."""

    def get_state(self) -> dict[str, np.ndarray]:
        """Copies of the current weights, by name."""

    def shape(self, name: str) -> tuple:
        """The shape of the weight ``name``."""

    def set(self, name: str, array: np.ndarray) -> None:
        """Overwrite the current value of the weight ``name`` (float32, its shape)."""

    def get_optimizer_state(self) -> list[np.ndarray] | None:
        """Copies of the optimizer state (momentum) a rebuild can carry, or None."""

    def set_optimizer_state(self, arrays: list[np.ndarray]) -> None:
        """Overwrite the optimizer state with what :meth:`get_optimizer_state` gave."""
