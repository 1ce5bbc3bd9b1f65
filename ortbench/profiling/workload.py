"""The training run ``ortbench profile`` hands to py-spy: one contender, one cell.

Usage: ``python -m ortbench.profiling.workload CONTENDER PROBLEM DATASET BATCH EPOCHS DEVICE
WARMUP``. It builds the contender and fits ``WARMUP`` epochs, prints ``ready``, waits for a
line on its standard input, trains ``EPOCHS`` more epochs, prints ``done`` and leaves at
once: what py-spy sees between the two lines is the steady epoch loop only. A last
argument, USER_FILES_JSON, loads a user's model and data (``UserFiles.to_json``).
"""

from __future__ import annotations

import os
import sys

from ..bench.contenders import make_contender
from ..bench.problems import batch_data_sizes, make_problem
from ..bench.user_model import UserFiles, load_user_problem
from .pyspy import DONE, READY


def main(argv: list[str]) -> None:
    contender, problem, dataset, batch_size, epochs, device, warmup, *user = argv
    if user:
        load_user_problem(UserFiles.from_json(user[0]))
    sizes = batch_data_sizes(problem, dataset, int(batch_size))
    cell = make_contender(
        contender, make_problem(problem, dataset, **sizes), int(batch_size), device
    )
    cell.fit(int(warmup))
    print(READY, flush=True)
    sys.stdin.readline()
    cell.continue_fit(int(epochs))
    print(DONE, flush=True)
    os._exit(0)  # no interpreter shutdown in the samples


if __name__ == "__main__":
    main(sys.argv[1:])
