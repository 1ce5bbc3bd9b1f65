"""A thin helper to author the small ONNX graphs of the engine readably.

Each graph of the engine (loss, penalty, update) is a named function that creates a
:class:`GraphBuilder`, declares its inputs, chains nodes with :meth:`GraphBuilder.op` and
returns :meth:`GraphBuilder.to_model`. Node and intermediate names are generated.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..runtime.build import MAX_IR_VERSION, MAX_OPSET

FLOAT = TensorProto.FLOAT


class GraphBuilder:
    """Accumulates inputs, nodes, constants and outputs of one ONNX graph."""

    def __init__(self, name: str, opset: int = MAX_OPSET, prefix: str = ""):
        self.name = name
        self.opset = opset
        self.prefix = prefix
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _unique(self, prefix: str) -> str:
        self._count += 1
        return f"{self.prefix}{prefix}_{self._count}"

    def input(self, name: str, shape: list | None = None, elem_type: int = FLOAT) -> str:
        """Declare a graph input and return its name."""
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, shape))
        return name

    def const(self, value, dtype=np.float32) -> str:
        """Add a constant initializer and return its name."""
        name = self._unique("c")
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, outputs: int = 1, name: str | None = None, **attrs):
        """Add one node; return its output name, or a tuple of names when ``outputs > 1``.

        ``name`` gives the (first) output a chosen name, for graph outputs.
        """
        names = [name or self._unique(op_type.lower())]
        names += [self._unique(op_type.lower()) for _ in range(outputs - 1)]
        node = helper.make_node(op_type, list(inputs), names, name=self._unique(op_type), **attrs)
        self.nodes.append(node)
        return names[0] if outputs == 1 else tuple(names)

    def add_all(self, names: list[str], name: str | None = None) -> str:
        """Sum several values with a chain of Add (differentiable, unlike Sum in ORT 1.19)."""
        total = names[0]
        for k, other in enumerate(names[1:], 2):
            total = self.op("Add", total, other, name=name if k == len(names) else None)
        return total if len(names) > 1 or name is None else self.op("Identity", total, name=name)

    def rename(self, value: str, name: str) -> str:
        """Give an intermediate value a chosen name (for outputs), without an Identity node."""
        for node in self.nodes:
            node.output[:] = [name if o == value else o for o in node.output]
            node.input[:] = [name if i == value else i for i in node.input]
        return name

    def output(self, name: str, shape: list | None = None, elem_type: int = FLOAT) -> None:
        """Declare an existing value as a graph output (Identity when renaming is needed)."""
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, shape))

    def to_model(self) -> onnx.ModelProto:
        """The finished, checked model at the opset and IR version the runtime reads."""
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", self.opset)],
            producer_name="ortbench",
        )
        model.ir_version = MAX_IR_VERSION
        onnx.checker.check_model(model)
        return model
