"""The vector-Jacobian rules of the portable backend, one module per operator family.

:data:`RULES` maps an operator type to its rule (see :mod:`.registry` for what a rule
is); importing this package registers every family:

- :mod:`.elementwise`: arithmetic, activations (Relu, Erf, Tanh, PRelu...), Where, Dropout;
- :mod:`.linear`: MatMul (batched) and Gemm;
- :mod:`.conv`: Conv;
- :mod:`.pool`: MaxPool, AveragePool, GlobalAveragePool;
- :mod:`.normalization`: BatchNormalization, LayerNormalization, InstanceNormalization,
  Softmax, LogSoftmax;
- :mod:`.shape`: reshapes, Transpose, Concat, Split, Slice, Gather, Expand;
- :mod:`.reduce`: ReduceSum and ReduceMean.
"""

from . import conv, elementwise, linear, normalization, pool, reduce, shape
from .registry import RULES, Rule, RuleContext

__all__ = [
    "RULES",
    "Rule",
    "RuleContext",
    "conv",
    "elementwise",
    "linear",
    "normalization",
    "pool",
    "reduce",
    "shape",
]
