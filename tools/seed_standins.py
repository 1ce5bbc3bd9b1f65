"""What the seed's unit tests import, answered by ortbench and by small stand-ins.

onnxcustom's tests import ``onnxcustom``, two helpers of ``pyquickhelper`` (a test base
class, a temporary folder, a warning filter) and a few of ``mlprodict`` (a converter, a
Python runtime, a text plot). None of the three is installed here. :func:`install` puts an
import hook in front of Python's finders that answers those three packages:

- any ``onnxcustom`` module holds the names of :mod:`ortbench.training.seed`, then of
  :mod:`ortbench.training`, then the few of :data:`SEED_EXTRAS`;
- any ``pyquickhelper`` or ``mlprodict`` module holds the stand-ins of this file.

``tools/seed_tests.py`` loads this module as a pytest plugin; it is not part of ortbench.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import io
import logging
import os
import shutil
import sys
import types
import unittest
import warnings
from collections.abc import Callable, Iterable

import numpy
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

#: The seed's highest tested opset (its ``__max_supported_opset__``).
SEED_OPSET = 15


def _max_opset() -> int:
    """The seed's ``get_max_opset``: the installed onnx's opset, at most the seed's."""
    return min(onnx.defs.onnx_opset_version(), SEED_OPSET)


def _seed_extras() -> dict:
    from sklearn.exceptions import ConvergenceWarning

    return {
        "__max_supported_opset__": SEED_OPSET,
        "get_max_opset": _max_opset,
        # the seed's own warning class; ortbench warns with scikit-learn's
        "ConvergenceWarning": ConvergenceWarning,
    }


# ---------------------------------------------------------------- pyquickhelper


class ExtTestCase(unittest.TestCase):
    """The assertions of pyquickhelper's test base class the seed's tests call.

    Arrays compare by value (a float32 output equals the float64 it was computed as),
    ``assertGreater`` and ``assertLess`` are not strict unless asked, as there.
    """

    def assertEqualArray(self, expected, value, decimal=None, **kwargs):
        expected, value = numpy.asarray(expected), numpy.asarray(value)
        self.assertEqual(expected.shape, value.shape)
        if decimal is None:
            numpy.testing.assert_array_equal(expected, value)
        else:
            numpy.testing.assert_almost_equal(expected, value, decimal=decimal)

    def assertEqualFloat(self, a, b, precision=1e-5):
        delta = abs(a - b) / max(abs(a), abs(b), 1e-300)
        if delta > precision:
            raise AssertionError(f"{a} != {b} (relative difference {delta})")

    def assertRaise(self, fct: Callable, exc=None, msg=None):
        expected = exc or Exception
        try:
            fct()
        except expected as e:
            if msg is not None and msg not in str(e):
                raise AssertionError(f"{msg!r} not in {str(e)!r}") from e
            return
        raise AssertionError(f"{exc or Exception} was not raised")

    def assertEmpty(self, value):
        if value is not None and len(value) > 0:
            raise AssertionError(f"not empty: {value!r}")

    def assertNotEmpty(self, value):
        if value is None or len(value) == 0:
            raise AssertionError(f"empty: {value!r}")

    def assertExists(self, path):
        if not os.path.exists(path):
            raise AssertionError(f"{path!r} does not exist")

    def assertStartsWith(self, prefix, text):
        if not text.startswith(prefix):
            raise AssertionError(f"{text!r} does not start with {prefix!r}")

    def assertGreater(self, a, b, strict=False):
        if (a <= b) if strict else (a < b):
            raise AssertionError(f"{a} {'<=' if strict else '<'} {b}")

    def assertLess(self, a, b, strict=False):
        if (a >= b) if strict else (a > b):
            raise AssertionError(f"{a} {'>=' if strict else '>'} {b}")

    def assertLogging(self, fct: Callable, logger_name: str, level=logging.WARNING):
        """Runs ``fct`` and returns its result and what the named logger wrote."""
        logger = logging.getLogger(logger_name)
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        old_level = logger.level
        logger.addHandler(handler)
        logger.setLevel(level)
        try:
            result = fct()
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
        return result, stream.getvalue()


def get_temp_folder(file: str, name: str, clean: bool = True) -> str:
    """A folder ``name`` beside ``file``, created if missing, emptied if ``clean``."""
    folder = os.path.join(os.path.dirname(os.path.abspath(file)), name)
    if clean:
        shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    return folder


def ignore_warnings(categories):
    """A decorator running a test with the given warning categories ignored."""
    categories = tuple(categories) if isinstance(categories, (list, tuple)) else (categories,)

    def decorator(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            with warnings.catch_warnings():
                for category in categories:
                    warnings.simplefilter("ignore", category)
                return test(*args, **kwargs)

        return run

    return decorator


def skipif_appveyor(reason: str):
    """The seed skipped these tests on one CI service only: here they run."""
    return lambda test: test


# ---------------------------------------------------------------- mlprodict


def _linear_regressor(model, x, opset: int) -> onnx.ModelProto:
    """``X @ coef + intercept``: mlprodict's ``black_op={'LinearRegressor'}`` graph.

    Inputs ``X`` (float, (N, F)); output ``variable`` (N, 1); initializers ``coef``
    (F, 1) and ``intercept`` (1,).
    """
    dtype = x.dtype
    coef = numpy.asarray(model.coef_, dtype=dtype).reshape((1, -1)).T
    intercept = numpy.asarray(model.intercept_, dtype=dtype).reshape((-1,))
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "coef"], ["multiplied"]),
            helper.make_node("Add", ["multiplied", "intercept"], ["variable"]),
        ],
        "linear_regressor",
        [helper.make_tensor_value_info("X", elem, [None, x.shape[1]])],
        [helper.make_tensor_value_info("variable", elem, [None, 1])],
        [numpy_helper.from_array(coef, "coef"), numpy_helper.from_array(intercept, "intercept")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _linear_classifier(model, x, opset: int) -> onnx.ModelProto:
    """A linear classifier in standard operators (mlprodict's graph for ``black_op``).

    Inputs ``X`` (float, (N, F)); outputs ``label`` (int64, (N,)) and ``probabilities``
    (N, C); initializers ``coef`` (F, 1 or C) and ``intercept`` (1 or C,). The raw score
    ``X @ coef + intercept`` is named ``score``; two classes take its sigmoid, more a
    softmax (a multinomial model's probabilities).
    """
    dtype = x.dtype
    coef = numpy.asarray(model.coef_, dtype=dtype).T
    intercept = numpy.asarray(model.intercept_, dtype=dtype).reshape((-1,))
    classes = numpy.asarray(model.classes_).astype(numpy.int64)
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    if coef.shape[1] == 1:
        to_probabilities = [
            helper.make_node("Sigmoid", ["score"], ["positive"]),
            helper.make_node("Sub", ["one", "positive"], ["negative"]),
            helper.make_node("Concat", ["negative", "positive"], ["probabilities"], axis=1),
        ]
    else:
        to_probabilities = [helper.make_node("Softmax", ["score"], ["probabilities"], axis=1)]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "coef"], ["multiplied"]),
            helper.make_node("Add", ["multiplied", "intercept"], ["score"]),
            *to_probabilities,
            helper.make_node("ArgMax", ["probabilities"], ["index"], axis=1, keepdims=0),
            helper.make_node("Gather", ["classes", "index"], ["label"]),
        ],
        "linear_classifier",
        [helper.make_tensor_value_info("X", elem, [None, x.shape[1]])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_tensor_value_info("probabilities", elem, [None, len(classes)]),
        ],
        [
            numpy_helper.from_array(coef, "coef"),
            numpy_helper.from_array(intercept, "intercept"),
            numpy_helper.from_array(numpy.array([1], dtype=dtype), "one"),
            numpy_helper.from_array(classes, "classes"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def to_onnx(model, x, target_opset=None, black_op=None, options=None) -> onnx.ModelProto:
    """mlprodict's converter: skl2onnx, or a linear model in ``MatMul`` and ``Add``."""
    opset = target_opset or _max_opset()
    from sklearn.base import is_classifier

    model = getattr(model, "best_estimator_", model)  # a fitted search: its best model
    linear = hasattr(model, "coef_")
    if linear and black_op and {"LinearRegressor", "LinearClassifier"} & set(black_op):
        if is_classifier(model):
            return _linear_classifier(model, x, opset)
        return _linear_regressor(model, x, opset)
    import skl2onnx

    return skl2onnx.to_onnx(
        model, x[:1], target_opset={"": opset, "ai.onnx.ml": 1}, options=options
    )


class BroadcastGradientArgs(OpRun):
    """onnxruntime's ``com.microsoft.BroadcastGradientArgs``: the axes each of two
    broadcast shapes was expanded along, the gradients to reduce over them."""

    op_domain = "com.microsoft"

    def _run(self, a_shape, b_shape):
        a, b = [int(d) for d in a_shape], [int(d) for d in b_shape]
        rank = max(len(a), len(b))
        a, b = [1] * (rank - len(a)) + a, [1] * (rank - len(b)) + b
        a_axes = [i for i in range(rank) if a[i] == 1 and b[i] != 1]
        b_axes = [i for i in range(rank) if b[i] == 1 and a[i] != 1]
        return numpy.array(a_axes, dtype=numpy.int64), numpy.array(b_axes, dtype=numpy.int64)


class OnnxInference:
    """mlprodict's Python runtime: onnx's reference evaluator, outputs by name."""

    def __init__(self, model: onnx.ModelProto):
        self.output_names = [o.name for o in model.graph.output]
        self._evaluator = ReferenceEvaluator(model, new_ops=[BroadcastGradientArgs])

    def run(self, feeds: dict) -> dict:
        return dict(zip(self.output_names, self._evaluator.run(None, feeds), strict=True))


def random_feed(inputs: Iterable, batch: int = 10) -> dict:
    """Random inputs for a graph's inputs, ``batch`` for each dimension with no value."""
    feeds = {}
    for value in inputs:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in tensor.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        feeds[value.name] = numpy.random.randn(*shape).astype(dtype)
    return feeds


def _value_line(kind: str, value: onnx.ValueInfoProto) -> str:
    tensor = value.type.tensor_type
    dims = [
        d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in tensor.shape.dim
    ]
    return f"{kind}: name={value.name!r} type={tensor.elem_type} shape={dims}"


def onnx_simple_text_plot(model: onnx.ModelProto) -> str:
    """A graph as text: its inputs, initializers, a line ``Op(inputs) -> outputs`` per
    node, its outputs."""
    graph = model.graph
    lines = [_value_line("input", i) for i in graph.input]
    lines += [f"init: name={i.name!r} shape={list(i.dims)}" for i in graph.initializer]
    lines += [f"{n.op_type}({', '.join(n.input)}) -> {', '.join(n.output)}" for n in graph.node]
    lines += [_value_line("output", o) for o in graph.output]
    return "\n".join(lines)


def export2onnx(model: onnx.ModelProto) -> str:
    """The part of mlprodict's code export the seed's tests read: each node's class name
    in skl2onnx's algebra (``'OnnxAdd'``)."""
    return "\n".join(f"{n.output[0]} = {'Onnx' + n.op_type!r}(...)" for n in model.graph.node)


def select_model_inputs_outputs(
    model: onnx.ModelProto, outputs=None, infer_shapes: bool = False, **kwargs
) -> onnx.ModelProto:
    """The part of a model that computes ``outputs`` (onnx's extractor)."""
    from onnx.utils import Extractor

    inputs = [i.name for i in model.graph.input]
    extracted = Extractor(model).extract_model(inputs, list(outputs))
    return onnx.shape_inference.infer_shapes(extracted) if infer_shapes else extracted


def _stand_ins() -> dict:
    return {
        name: globals()[name]
        for name in (
            "ExtTestCase",
            "get_temp_folder",
            "ignore_warnings",
            "skipif_appveyor",
            "to_onnx",
            "OnnxInference",
            "random_feed",
            "onnx_simple_text_plot",
            "export2onnx",
            "select_model_inputs_outputs",
        )
    }


# ---------------------------------------------------------------- the import hook


class _Namespace(types.ModuleType):
    """A module whose names are looked up, in order, in ``sources``."""

    def __init__(self, name: str, sources: list[Callable[[], dict | types.ModuleType]]):
        super().__init__(name)
        self.__path__ = []  # a package: its submodules come through the hook too
        self._sources = sources

    def __getattr__(self, name: str):
        if name.startswith("__") and name not in ("__max_supported_opset__",):
            raise AttributeError(name)
        for source in self._sources:
            found = source()
            found = found if isinstance(found, dict) else vars(found)
            if name in found:
                return found[name]
        raise AttributeError(f"ortbench has no {name!r} for {self.__name__}")


def _ortbench_seed():
    import ortbench.training.seed

    return ortbench.training.seed


def _ortbench_training():
    import ortbench.training

    return ortbench.training


#: The packages the hook answers, and where their names come from.
ROOTS = {
    "onnxcustom": [_ortbench_seed, _ortbench_training, _seed_extras],
    "pyquickhelper": [_stand_ins],
    "mlprodict": [_stand_ins],
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in ROOTS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Namespace(spec.name, ROOTS[spec.name.split(".")[0]])

    def exec_module(self, module):
        pass


def install() -> None:
    """Answers ``onnxcustom``, ``pyquickhelper`` and ``mlprodict`` imports from here on."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def pytest_configure(config) -> None:
    """pytest plugin entry: the hook is in place before the seed's modules are collected."""
    install()
    with contextlib.suppress(Exception):
        logging.getLogger("skl2onnx").setLevel(logging.WARNING)
