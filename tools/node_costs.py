"""What onnxruntime pays per node and per ``Scan`` iteration, by operator type.

For each operator type, a ``Scan`` whose body chains 1 or 9 nodes of that type on a (1, 4)
float tensor runs 1,000 and 2,000 iterations under valgrind's callgrind (one thread,
graph optimizations off, each session run 3 times before it is counted). The slope
between the two lengths is the count per iteration; between the two bodies, per node.
The numbers are instructions, not time: deterministic, and free of the machine's load.

Usage (needs valgrind and a C compiler, as ``ortbench ab --measure instructions``)::

    python tools/node_costs.py [OPERATOR ...]

prints a markdown table (``benchmarks/README.md`` keeps one).
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from ortbench.bench.instructions import client_library, totals

#: Operator types counted when none is named.
OPERATORS = ["Identity", "Relu", "ReluGrad", "Add", "Sub", "Mul", "Sum", "Gemm", "MatMul"]
LENGTHS = (1000, 2000)
CHAINS = (1, 9)


def chain_node(op_type: str, previous: str, name: str):
    """One node of the chain: reads the previous node's output (and ``x`` or ``M``)."""
    if op_type in ("Gemm", "MatMul"):
        return helper.make_node(op_type, [previous, "M"], [name])
    if op_type in ("Identity", "Relu"):
        return helper.make_node(op_type, [previous], [name])
    domain = "com.microsoft" if op_type == "ReluGrad" else ""
    return helper.make_node(op_type, [previous, "x"], [name], domain=domain)


def scan_model(op_type: str, nodes: int, length: int):
    """A ``Scan`` of ``length`` iterations over ``X`` (length, 1, 4), carrying ``s`` (1, 4)
    through a body of ``nodes`` nodes of ``op_type``."""
    body_nodes, previous = [], "s"
    for k in range(nodes):
        body_nodes.append(chain_node(op_type, previous, f"t{k}"))
        previous = f"t{k}"
    row = [1, 4]
    body = helper.make_graph(
        body_nodes,
        "body",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, row) for n in ("s", "x")],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, row)],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "M")],
    )
    scan = helper.make_node("Scan", ["s0", "X"], ["sT"], body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [scan],
        "chain",
        [
            helper.make_tensor_value_info("s0", TensorProto.FLOAT, row),
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [length, *row]),
        ],
        [helper.make_tensor_value_info("sT", TensorProto.FLOAT, row)],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def count(operators: list[str], cache: Path) -> None:
    """Run every model once counted (this process runs under callgrind)."""
    client = ctypes.CDLL(str(client_library(cache)))
    client.ortbench_count_dump.argtypes = [ctypes.c_char_p]
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    for op_type in operators:
        for nodes in CHAINS:
            for length in LENGTHS:
                model = scan_model(op_type, nodes, length).SerializeToString()
                session = onnxruntime.InferenceSession(
                    model, options, providers=["CPUExecutionProvider"]
                )
                feeds = {
                    "s0": np.zeros((1, 4), np.float32),
                    "X": np.full((length, 1, 4), 1e-3, np.float32),
                }
                for _ in range(3):
                    session.run(None, feeds)
                client.ortbench_count_start()
                client.ortbench_count_zero()
                session.run(None, feeds)
                client.ortbench_count_dump(f"{op_type}|{nodes}|{length}".encode())
                client.ortbench_count_stop()


def table(folder: Path) -> str:
    """The markdown table of the dumps in ``folder``."""
    counts = {}
    for dump in folder.iterdir():
        label, instructions = totals(dump)
        if label.count("|") == 2:
            op_type, nodes, length = label.split("|")
            counts[op_type, int(nodes), int(length)] = instructions
    rows = [
        "| operator | per iteration, 1 node | per node |",
        "|---|---:|---:|",
    ]
    short, long = LENGTHS
    for op_type in dict.fromkeys(k[0] for k in sorted(counts)):
        per = {
            n: (counts[op_type, n, long] - counts[op_type, n, short]) / (long - short)
            for n in CHAINS
        }
        node = (per[CHAINS[1]] - per[CHAINS[0]]) / (CHAINS[1] - CHAINS[0])
        rows.append(f"| {op_type} | {per[CHAINS[0]]:,.0f} | {node:,.0f} |")
    return "\n".join(rows)


def main() -> None:
    if sys.argv[1:2] == ["--counted"]:
        count(sys.argv[3:], Path(sys.argv[2]))
        return
    operators = sys.argv[1:] or OPERATORS
    with tempfile.TemporaryDirectory() as work:
        dumps = Path(work) / "dumps"
        dumps.mkdir()
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={dumps}/callgrind.%p",
            sys.executable,
            __file__,
            "--counted",
            work,
            *operators,
        ]
        subprocess.run(command, check=True, capture_output=True)
        print(table(dumps))


if __name__ == "__main__":
    main()
