"""What every suite shares: the parameter axes, one base class that makes a cell's
contender, and one that times as the timing protocol does."""

from __future__ import annotations

import contextlib

from ortbench.bench.contenders import CONTENDERS, Contender, Unavailable, make_contender
from ortbench.bench.contenders.ort import OrtContender
from ortbench.bench.machine import available_devices
from ortbench.bench.problems import default_datasets, make_problem, sized_problems
from ortbench.bench.timing import settled_heap
from ortbench.training import OrtBenchError

CONTENDER_NAMES = list(CONTENDERS)
#: The contenders that train with ortbench's engine (they run onnxruntime sessions).
ENGINE_CONTENDERS = [name for name, cls in CONTENDERS.items() if issubclass(cls, OrtContender)]
#: The model-size axis: the built-in problems at their default size (MLP 50-10), and the
#: regression MLP at hidden layers 256 and 128 too. A small set: ``asv run --quick`` of
#: every suite has to stay under 10 minutes on 2 cores (docs/benchmarks.md).
SIZES = ((50, 10), (256, 128))
PROBLEM_NAMES = [*sized_problems(("linear", "mlp"), SIZES), "mlp-binary"]
BATCH_SIZES = [1, 15, 256]
#: the CPU, and CUDA where a device answers
DEVICES = list(available_devices())
PARAM_NAMES = ["contender", "problem", "batch_size", "device"]


class ContenderSuite:
    """An asv suite over contender x problem x batch size x device.

    A suite lists the values it uses of each axis (``contenders``, ``problems``,
    ``batch_sizes``, ``devices``: all of them unless it says otherwise); asv's ``params``
    are made from them. :meth:`setup` makes the cell's contender as ``self.contender``; a
    cell it cannot run raises NotImplementedError, which asv records as skipped.
    """

    contenders = CONTENDER_NAMES
    problems = PROBLEM_NAMES
    batch_sizes = BATCH_SIZES
    devices = DEVICES
    param_names = PARAM_NAMES
    timeout = 300

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.params = [cls.contenders, cls.problems, cls.batch_sizes, cls.devices]

    def setup(self, name: str, problem: str, batch_size: int, device: str) -> None:
        self.contender = contender(name, problem, batch_size, device)


def contender(name: str, problem: str, batch_size: int, device: str) -> Contender:
    """The cell's contender on the problem's default data set (the digit images for the
    network problems); NotImplementedError when it cannot run."""
    try:
        dataset = default_datasets((problem,)) or ()
        return make_contender(name, make_problem(problem, *dataset), batch_size, device)
    except (Unavailable, OrtBenchError) as e:  # one line naming the reason, asv skips the cell
        raise NotImplementedError(str(e)) from None


class Settled:
    """A suite whose timed code runs as the timing protocol's fits do: its ``setup`` ends
    with :meth:`settle`, which collects the garbage of building, keeps what is left out
    of later collections and waits for the warm-up's threads to stop spinning
    (:func:`ortbench.bench.timing.settled_heap`); ``teardown`` releases the heap."""

    def settle(self) -> None:
        self.heap = contextlib.ExitStack()
        self.heap.enter_context(settled_heap())

    def teardown(self, *params) -> None:
        heap = getattr(self, "heap", None)
        if heap is not None:
            heap.close()
