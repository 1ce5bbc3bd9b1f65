"""Which onnxruntime build is installed, and the ortbench extra that installs each one.

The builds (``onnxruntime-training-cpu``, ``onnxruntime``, ``onnxruntime-gpu``) all install
the import package ``onnxruntime`` and overwrite each other, so ortbench depends on none of
them: its extras choose one. This module imports no onnxruntime, so that the ``ortbench``
command can say which extra to install when none is.
"""

from __future__ import annotations

import importlib.metadata
from functools import cache

#: ortbench's extras: what each installs and what it runs.
EXTRAS = {
    "training": "onnxruntime-training-cpu 1.19.2, Python 3.10 to 3.12: every contender",
    "cpu": "onnxruntime: the portable contenders",
    "gpu": "onnxruntime-gpu: the portable contenders, on CUDA too",
}

#: How to install the peers' libraries, which their contenders' "unavailable" reasons name.
TORCH_INSTALL = "pip install torch"
JAX_INSTALL = "pip install 'ortbench[jax]'"

#: How to install the training build, the only one that runs every contender.
TRAINING_INSTALL = "pip install 'ortbench[training]' in a fresh environment, Python 3.10 to 3.12"


class MissingRuntimeError(ImportError):
    """No onnxruntime build is installed: the message names the extras that install one."""


def missing_runtime() -> MissingRuntimeError:
    """The one-line error for an environment without any onnxruntime build.

    Returns
    -------
    MissingRuntimeError
        An ImportError whose message lists the extras, to raise.
    """
    extras = ", ".join(f"'ortbench[{name}]' ({what})" for name, what in EXTRAS.items())
    return MissingRuntimeError(
        f"no onnxruntime is installed: pip install one of {extras}", name="onnxruntime"
    )


@cache
def runtime_distributions() -> str:
    """The installed distributions that provide the ``onnxruntime`` import package.

    Returns
    -------
    str
        Their names and versions, such as ``'onnxruntime-gpu 1.31.1'``; two or more when one
        build overwrote another's files; ``'onnxruntime built from source'`` when none is
        recorded.
    """
    names = sorted(set(importlib.metadata.packages_distributions().get("onnxruntime", ())))
    found = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)
    return found or "onnxruntime built from source"
