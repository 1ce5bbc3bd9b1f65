"""The training run ``ortbench profile`` hands to py-spy: one contender, one cell.

Usage: ``python -m ortbench.profiling.workload CONTENDER PROBLEM DATASET BATCH EPOCHS DEVICE
STATUS_FILE [USER_FILES_JSON]``; writes ``ok`` into STATUS_FILE when the fit finished. The
last argument loads a user's model and data (``UserFiles.to_json``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..bench.contenders import make_contender
from ..bench.problems import make_problem
from ..bench.user_model import UserFiles, load_user_problem


def main(argv: list[str]) -> None:
    contender, problem, dataset, batch_size, epochs, device, status, *user = argv
    if user:
        load_user_problem(UserFiles.from_json(user[0]))
    cell = make_contender(contender, make_problem(problem, dataset), int(batch_size), device)
    cell.fit(int(epochs))
    Path(status).write_text("ok\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
