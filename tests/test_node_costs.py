"""``tools/node_costs.py``, which measures onnxruntime's cost per node for the performance
log: its models compute what they claim, and its table takes the right differences."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "node_costs.py"


@pytest.fixture(scope="module")
def node_costs():
    spec = importlib.util.spec_from_file_location("node_costs", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Gemm", "Identity"])
def test_the_scan_chains_its_nodes(node_costs, op_type):
    """Each iteration applies the chain of ``nodes`` nodes to the carried value and the
    iteration's row, as numpy does."""
    nodes, length = 3, 5
    model = node_costs.scan_model(op_type, nodes, length)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    rng = np.random.RandomState(0)
    s = rng.uniform(0.5, 1.5, (1, 4)).astype(np.float32)
    X = rng.uniform(0.5, 1.5, (length, 1, 4)).astype(np.float32)
    steps = {
        "Add": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "Gemm": lambda v, x: v @ np.eye(4, dtype=np.float32),
        "Identity": lambda v, x: v,
    }
    expected = s
    for x in X:
        for _ in range(nodes):
            expected = steps[op_type](expected, x)
    (found,) = session.run(None, {"s0": s, "X": X})
    np.testing.assert_allclose(found, expected, rtol=1e-6)


def test_the_table_gives_per_iteration_and_per_node_slopes(node_costs, tmp_path):
    """Counts made up as 1,000 + 2,500 per iteration + 3,000 per node and iteration."""
    for k, (nodes, length) in enumerate(
        (n, length) for n in node_costs.CHAINS for length in node_costs.LENGTHS
    ):
        count = 1000 + length * (2500 + 3000 * nodes)
        (tmp_path / f"callgrind.{k}").write_text(
            f"desc: Trigger: Client Request: Add|{nodes}|{length}\ntotals: {count}\n"
        )
    (tmp_path / "callgrind.main").write_text("desc: Trigger: Program termination\ntotals: 7\n")
    rows = node_costs.table(tmp_path).splitlines()
    assert rows[2:] == ["| Add | 5,500 | 3,000 |"]
