"""Progress of training and of a bench run: a bar on a terminal, one line per step otherwise."""

from __future__ import annotations

import io
import re

from ortbench.progress import Progress
from ortbench.training import FullTrainer, LearningRateSGD


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_verbose_fit_writes_one_line_per_epoch(regression, mlp_onnx, capsys):
    X, y = regression
    model = FullTrainer(mlp_onnx, learning_rate=LearningRateSGD(1e-3), max_iter=3, verbose=1)
    model.fit(X, y)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 3
    for epoch, (line, loss) in enumerate(zip(lines, model.train_losses_), start=1):
        match = re.fullmatch(
            rf"\[FullTrainer\] epoch {epoch}/3 loss=(\S+) lr=0\.001 \((\d+\.\d)s(, about \d+s left)?\)",
            line,
        )
        assert match, line
        assert float(match.group(1)) == float(f"{loss:.6g}")
        assert (match.group(3) is None) == (epoch == 3)  # time left until the last epoch


def test_progress_on_a_terminal_is_a_bar():
    stream = Terminal()
    progress = Progress(4, "FullTrainer", "epoch", stream=stream)
    for k in range(4):
        progress.step(f"loss={k}")
    text = stream.getvalue()
    assert "\r" in text and "4/4" in text and "loss=3" in text and "epoch" in text
    assert "[FullTrainer]" not in text  # not the line format


def test_progress_estimates_the_time_left():
    stream = io.StringIO()
    progress = Progress(4, "ortbench bench", "cell", stream=stream)
    for elapsed in (1.0, 2.0, 3.0, 4.0):
        progress.step("", elapsed)
    assert stream.getvalue().splitlines() == [
        "[ortbench bench] cell 1/4 (1.0s, about 3s left)",
        "[ortbench bench] cell 2/4 (2.0s, about 2s left)",
        "[ortbench bench] cell 3/4 (3.0s, about 1s left)",
        "[ortbench bench] cell 4/4 (4.0s)",
    ]
