"""Where the steps of an epoch leave each batch's loss, and the epoch's mean loss.

A step needs the gradient of the loss, not the loss itself, which is only reported (the
epoch's mean over samples). Two ways:

- **after the epoch** (``loss`` given; the staged epoch is one host buffer, on the CPU):
  each step writes its batch's prediction into its slice of one ``(n_batches, n, c)``
  buffer, and one run after the epoch computes every batch's loss at once
  (:meth:`~ortbench.training.losses.BaseLearningLoss.build_epoch_function`): the loss's
  own nodes run once an epoch instead of once a step;
- **at each step** (``loss`` None): each step writes its loss into its own slot, or one
  run writes every batch's (the epoch loop: :meth:`BatchLosses.every_batch`).

Either way the epoch's loop only runs: it reads no loss between steps.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..graphs.loading import fit_runtime
from ..losses import BaseLearningLoss
from ..runtime import capi
from ..runtime.devices import cpu_scalar, ort_device
from ..runtime.sessions import SessionMaker
from .batches import BatchLoader


class BatchLosses:
    """Each batch's loss of an epoch, written by the steps or computed after them.

    Parameters
    ----------
    loss : BaseLearningLoss or None
        The loss to compute after the epoch from the kept predictions; None when each
        step writes its own loss.
    shape : list of int
        The shape of one step's loss output (``[]`` or ``[1, 1]``), with ``loss`` None.
    sessions : SessionMaker
        Makes the session of the losses' graph.
    """

    def __init__(self, loss: BaseLearningLoss | None, shape: list[int], sessions: SessionMaker):
        self.after_epoch = loss is not None
        self._shape = [1, 1] if self.after_epoch else shape
        self.graphs: dict[str, onnx.ModelProto] = {}
        if self.after_epoch:
            model = loss.build_epoch_function()
            self.graphs = {"epoch_losses": model}
            self._session = sessions.session(
                fit_runtime(model).SerializeToString(), "epoch_losses", one_thread=True
            )

    def bind(self, loader: BatchLoader) -> list[capi.OrtValue]:
        """Allocate the slots of the loader's batches (and bind the run after the epoch,
        over its staged epoch); return what the step of batch ``k`` writes, by ``k``: its
        prediction after the epoch, its loss otherwise."""
        batches = loader.batches
        self._n_samples = loader.n_samples
        self._lengths = np.array([batch.length for batch in batches], dtype=np.float64)
        self._losses = np.zeros((len(batches), *self._shape), dtype=np.float32)
        self._flat = self._losses.reshape(-1)  # a view, one loss per batch
        if not self.after_epoch:
            return [cpu_scalar(self._losses[k, ...]) for k in range(len(batches))]  # views
        epoch = loader.staged_epoch()
        shape = tuple(batches[0].values[1].shape())  # every batch has batch_size rows
        self._predictions = np.zeros((len(batches), *shape), dtype=np.float32)
        run = capi.Binding(self._session)
        run.bind_input("predicted", cpu_scalar(self._predictions))
        run.bind_input("expected", epoch.values[1])
        run.bind_input("loss_scale", epoch.loss_scale)
        run.bind_output("losses", cpu_scalar(self._losses))
        self._run = run
        cpu = ort_device("cpu")
        return [capi.OrtValue.ortvalue_from_numpy(p, cpu) for p in self._predictions]

    def every_batch(self) -> capi.OrtValue:
        """The losses of every batch at once, ``(n_batches, *shape)``, for one run that
        writes them all (the epoch loop's); call :meth:`bind` first."""
        return cpu_scalar(self._losses)

    def mean(self) -> float:
        """The epoch's loss, the mean over samples (each batch's loss weighs its real
        rows), once the steps of the epoch have run."""
        if self.after_epoch:
            self._run.run()
        return float(self._flat @ self._lengths) / self._n_samples
