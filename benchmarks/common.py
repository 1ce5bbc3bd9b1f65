"""What every suite shares: the parameter axes and how a cell gets its contender."""

from __future__ import annotations

from ortbench.bench.contenders import CONTENDERS, Contender, Unavailable, make_contender
from ortbench.bench.machine import available_devices
from ortbench.bench.problems import PROBLEMS, make_problem

CONTENDER_NAMES = list(CONTENDERS)
PROBLEM_NAMES = list(PROBLEMS)
BATCH_SIZES = [1, 15, 256]
#: the CPU, and CUDA where a device answers
DEVICES = list(available_devices())

PARAMS = [CONTENDER_NAMES, PROBLEM_NAMES, BATCH_SIZES, DEVICES]
PARAM_NAMES = ["contender", "problem", "batch_size", "device"]


def contender(name: str, problem: str, batch_size: int, device: str) -> Contender:
    """The cell's contender on the default data set; NotImplementedError when it cannot run."""
    try:
        return make_contender(name, make_problem(problem), batch_size, device)
    except Unavailable as e:
        raise NotImplementedError(str(e)) from None
