"""onnxruntime's Python package, imported without torch.

onnxruntime's Python package imports torch, when torch is installed, from three places
the engine never needs: ``import onnxruntime`` checks its build by importing
``onnxruntime.training.ortmodule`` (torch, then sympy: about 5 s); the package
``onnxruntime.training`` imports its torch optimizers in its ``__init__``
(microsoft/onnxruntime#22070), and ``onnxruntime.tools`` its torch export helpers. The
pieces the engine uses (``onnxruntime.training.artifacts``, ``onnxblock``, ``api``,
``onnxruntime.tools.convert_onnx_models_to_ort``) import without torch.

:func:`leave_out_torch` runs when ``ortbench`` is imported, before any of its modules
imports onnxruntime, and imports nothing itself. It registers an empty package object
for ``onnxruntime.training`` and ``onnxruntime.tools``, each with the real folder as its
``__path__`` (their submodules import as usual, their ``__init__`` does not run), and
marks ``onnxruntime.training.ortmodule`` as not importable, which the build check takes
as "no ORTModule": ORTModule, torch's wrapper, does not import in a process that
imported ortbench first. A process that imported onnxruntime before ortbench keeps what
it imported; :func:`register_shells` then still makes the engine's pieces importable
when torch is absent.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

#: The subpackages whose ``__init__`` imports torch, and that the engine reaches into.
SHELLED = ("training", "tools")
#: What ``import onnxruntime`` imports to check its build, and torch with it.
BUILD_CHECK = "onnxruntime.training.ortmodule"


def register_shells() -> bool:
    """Register the empty package objects of :data:`SHELLED` that are not imported yet.

    Returns
    -------
    bool
        Whether onnxruntime is installed (found without being imported).
    """
    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):  # a finder that refuses it: not installed
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(spec.submodule_search_locations[0])
    for name in SHELLED:
        full = f"onnxruntime.{name}"
        if (root / name / "__init__.py").exists() and full not in sys.modules:
            shell = types.ModuleType(full)
            shell.__spec__ = importlib.machinery.ModuleSpec(full, None, is_package=True)
            shell.__path__ = shell.__spec__.submodule_search_locations = [str(root / name)]
            sys.modules[full] = shell
    return True


def leave_out_torch() -> None:
    """Make the next ``import onnxruntime`` import no torch (see the module's docstring).

    Does nothing when onnxruntime is already imported or not installed (the commands
    that need it then say what is missing).
    """
    if "onnxruntime" in sys.modules or not register_shells():
        return
    sys.modules.setdefault(BUILD_CHECK, None)  # its import fails at once: no torch
