"""Gradient graphs built by onnxruntime-training.

:func:`onnx_derivative` gives a standalone graph (vector-Jacobian product) runnable by an
InferenceSession; :func:`build_training_graph` gives the forward/backward model and the
metadata a TrainingAgent needs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from ..errors import ArgumentTypeError, OrtBenchError
from ..graphs.builder import GraphBuilder
from ..graphs.loading import fit_runtime
from ..graphs.nodes import rewrite_linear_nodes
from ..graphs.outputs import select_outputs
from ..graphs.weights import check_weight_names, trainable_initializers, weights_as_inputs
from ..runtime import capi
from ..runtime.build import check_training_build, quiet_logs, runtime_problem
from ..runtime.sessions import session_options
from .kernel_forms import rewrite_gradient_kernels
from .ort_preparation import gradient_builder_error, prepare_for_gradient_builder
from .portable import vjp_graph

BACKENDS = ("ort-training", "portable")


def choose_backend(backend: str | None) -> str:
    """The gradient backend to use: the one asked, else ort-training when installed."""
    if backend is None:
        return "portable" if runtime_problem() else "ort-training"
    if backend not in BACKENDS:
        raise OrtBenchError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "ort-training":
        check_training_build()
    return backend


class DerivativeOptions(enum.IntFlag):
    """The seed's flags for :func:`onnx_derivative`.

    ``KeepYieldOp`` (alone): onnxruntime-training's forward/backward graph as its builder
    makes it, with the YieldOp node between both passes; ``KeepOutputs``: the model's
    outputs follow the gradients; ``FillGrad`` (with ``KeepOutputs``, as the seed
    requires): the upstream gradient is ones instead of an input. ``Loss`` (the seed's
    value 5, not a combination): the gradient graph of the outputs ``label`` names, saved
    to a file (see :func:`onnx_derivative`).
    """

    Zero = 0
    KeepYieldOp = 1
    KeepOutputs = 2
    FillGrad = 4
    Loss = 5


def _check_options(options) -> DerivativeOptions:
    """The seed's validation of :class:`DerivativeOptions` combinations."""
    if not isinstance(options, DerivativeOptions):
        raise ArgumentTypeError(
            f"options must be a DerivativeOptions (such as DerivativeOptions.KeepOutputs), "
            f"got {type(options).__name__} {options!r}"
        )
    known = sum(int(flag) for flag in DerivativeOptions)
    if int(options) & ~known:
        raise OrtBenchError(
            f"options must combine DerivativeOptions flags (KeepYieldOp, KeepOutputs, "
            f"FillGrad), got {options!r}"
        )
    options = DerivativeOptions(options)
    if options & DerivativeOptions.KeepYieldOp and options != DerivativeOptions.KeepYieldOp:
        raise OrtBenchError("DerivativeOptions.KeepYieldOp cannot be combined with other flags")
    if options & DerivativeOptions.FillGrad and not options & DerivativeOptions.KeepOutputs:
        raise OrtBenchError(
            "DerivativeOptions.FillGrad needs KeepOutputs too: use "
            "DerivativeOptions.FillGrad | DerivativeOptions.KeepOutputs"
        )
    return options


def onnx_derivative(
    onx,
    weights: list[str] | None = None,
    inputs: list[str] | None = None,
    keep_outputs: bool = False,
    fill_grad: bool = False,
    options: DerivativeOptions | None = None,
    backend: str | None = None,
    loss: str | None = None,
    label: str | list[str] | None = None,
    path_name: str | None = None,
) -> onnx.ModelProto:
    """The gradient graph of a model with respect to its weights and/or inputs.

    Parameters
    ----------
    onx : onnx.ModelProto, bytes or path
        The model.
    weights : list of str, optional
        The initializers to differentiate; by default :func:`trainable_initializers`
        (none for a model without float initializers: its inputs are differentiated
        then), ``[]`` for none.
    inputs : list of str, optional
        The float inputs to differentiate; by default every float input.
    keep_outputs : bool, default=False
        Also output the model's outputs.
    fill_grad : bool, default=False
        Take the upstream gradient as ones instead of adding inputs for it.
    options : DerivativeOptions, optional
        The seed's flags; when given, they set ``keep_outputs`` and ``fill_grad``,
        validated as the seed did: ``FillGrad`` only with ``KeepOutputs``,
        ``KeepYieldOp`` alone (onnxruntime-training's forward/backward graph with its
        YieldOp node, ``backend='ort-training'`` only); other values are refused, and
        a value that is not a ``DerivativeOptions`` (a plain int) raises
        :class:`ArgumentTypeError`, a ``TypeError``, as the seed did.
    backend : {'ort-training', 'portable'}, optional
        ``'ort-training'`` asks onnxruntime-training's gradient builder (its graph uses
        training-only kernels); ``'portable'`` builds it from standard operators only
        (:mod:`ortbench.training.gradients.portable`), runnable by any onnxruntime build. The
        default is ort-training where it is installed, else portable.
    loss, label, path_name : str, optional
        With ``options=DerivativeOptions.Loss`` only, and then required, as the seed's
        onnxruntime builder took them: ``label`` names the float outputs (one or a list)
        whose gradient is built, with ones as upstream gradient, with respect to the float
        inputs not so named (``inputs`` by default) and no weight (``weights`` must be
        None); the graph keeps those outputs and is saved to ``path_name``; ``loss`` is
        the name the seed gave its builder's loss, a string that changes nothing.

    Returns
    -------
    onnx.ModelProto
        Inputs: the model's inputs, each weight as an input, then ``<y>_grad`` for each
        float output ``y`` (the upstream gradient; absent with ``fill_grad``). Outputs:
        ``<x>_grad`` for each differentiated input, then ``<w>_grad`` for each weight,
        then the model's outputs when ``keep_outputs``.

    Raises
    ------
    OrtBenchError
        For an unknown weight or input, nothing to differentiate, invalid ``options``, or
        a model the backend cannot differentiate.
    ArgumentTypeError
        When ``options`` is not a ``DerivativeOptions``.
    """
    backend = choose_backend(backend)
    if options is DerivativeOptions.Loss:
        if weights is not None:
            raise OrtBenchError("DerivativeOptions.Loss differentiates inputs only: weights=None")
        return _derivative_of_named_outputs(onx, inputs, backend, loss, label, path_name)
    if (loss, label, path_name) != (None, None, None):
        raise OrtBenchError("loss, label and path_name go with options=DerivativeOptions.Loss")
    yield_op = False
    if options is not None:
        options = _check_options(options)
        keep_outputs = bool(options & DerivativeOptions.KeepOutputs)
        fill_grad = bool(options & DerivativeOptions.FillGrad)
        yield_op = bool(options & DerivativeOptions.KeepYieldOp)
    model = rewrite_linear_nodes(onx)
    if weights is None and not trainable_initializers(model):
        weights = []
    weights = check_weight_names(model, weights) if weights != [] else []
    float_inputs = [i.name for i in model.graph.input if i.type.tensor_type.elem_type == 1]
    if inputs is None:
        inputs = float_inputs
    for name in inputs:
        if name not in float_inputs:
            raise OrtBenchError(
                f"unknown or non-float input {name!r}: expected among {float_inputs}"
            )
    if not inputs and not weights:
        raise OrtBenchError("onnx_derivative needs at least one weight or input to differentiate")
    if yield_op:
        if backend != "ort-training":
            raise OrtBenchError("DerivativeOptions.KeepYieldOp needs backend='ort-training'")
        return onnx.load_model_from_string(build_training_graph(model, weights, inputs).model)
    model = weights_as_inputs(model, weights)
    outputs = [o for o in model.graph.output if o.type.tensor_type.elem_type == 1]
    wanted = [f"{n}_grad" for n in [*inputs, *weights]]
    if keep_outputs:
        wanted += [o.name for o in outputs]
    if backend == "portable":
        grad = vjp_graph(model, [*inputs, *weights], fill_grad=fill_grad)
        _keep_outputs(grad, wanted)
        return grad

    model = prepare_for_gradient_builder(model)
    b = GraphBuilder("vjp", prefix="ortbench_vjp_")
    terms = []
    for out in outputs:
        if fill_grad:
            terms.append(b.op("ReduceSum", out.name, keepdims=0))
        else:
            shape = [d.dim_value or d.dim_param or None for d in out.type.tensor_type.shape.dim]
            upstream = b.input(f"ortbench_up_{out.name}", shape)
            terms.append(b.op("ReduceSum", b.op("Mul", out.name, upstream), keepdims=0))
    total = b.add_all(terms, name="ortbench_vjp_total")
    model.graph.input.extend(b.inputs)
    model.graph.initializer.extend(b.initializers)
    model.graph.node.extend(b.nodes)
    model.graph.output.append(helper.make_tensor_value_info(total, TensorProto.FLOAT, []))

    quiet_logs()
    try:
        builder = capi.GradientGraphBuilder(
            fit_runtime(model).SerializeToString(),
            {total},
            set(inputs) | set(weights),
            total,
            session_options(),
        )
        builder.build()
    except RuntimeError as e:
        raise gradient_builder_error(e, model) from None
    grad = onnx.load_model_from_string(builder.get_model())
    _rename_upstream(grad, [o.name for o in outputs])
    _keep_outputs(grad, wanted)
    return grad


def _derivative_of_named_outputs(onx, inputs, backend, loss, label, path_name):
    """:func:`onnx_derivative` with ``DerivativeOptions.Loss``: the seed's checks, then the
    gradient of the outputs ``label`` names (upstream ones) with the outputs kept, saved."""
    if path_name is None:
        raise OrtBenchError("DerivativeOptions.Loss saves the graph: give path_name, a file")
    if label is None:
        raise OrtBenchError("DerivativeOptions.Loss needs label, the outputs to differentiate")
    if not isinstance(loss, str):
        raise OrtBenchError(f"DerivativeOptions.Loss needs loss, a name, got {loss!r}")
    model = rewrite_linear_nodes(onx)
    labels = [label] if isinstance(label, str) else list(label)
    floats = [o.name for o in model.graph.output if o.type.tensor_type.elem_type == 1]
    for name in labels:
        if name not in floats:
            raise OrtBenchError(f"label {name!r} is not a float output: expected among {floats}")
    model = select_outputs(model, labels)
    if inputs is None:
        inputs = [i.name for i in model.graph.input if i.type.tensor_type.elem_type == 1]
    inputs = [name for name in inputs if name not in labels]
    options = DerivativeOptions.KeepOutputs | DerivativeOptions.FillGrad
    grad = onnx_derivative(model, [], inputs, options=options, backend=backend)
    try:
        onnx.save(grad, path_name)
    except OSError as e:
        raise OrtBenchError(
            f"cannot write the gradient graph to {path_name}: {e.strerror or e}"
        ) from None
    return grad


def _rename_upstream(model: onnx.ModelProto, outputs: list[str]) -> None:
    """Name the upstream-gradient inputs ``<y>_grad``; move clashing internal names aside."""
    mapping = {}
    for name in outputs:
        mapping[f"{name}_grad"] = f"ortbench_internal_{name}_grad"
        mapping[f"ortbench_up_{name}"] = f"{name}_grad"
    graph = model.graph
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        value.name = mapping.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [mapping.get(n, n) for n in node.input]
        node.output[:] = [mapping.get(n, n) for n in node.output]


def _keep_outputs(model: onnx.ModelProto, names: list[str]) -> None:
    by_name = {o.name: o for o in model.graph.output}
    kept = [by_name[n] for n in names]
    del model.graph.output[:]
    model.graph.output.extend(kept)


@dataclass
class TrainingGraph:
    """What a TrainingAgent needs: the forward/backward model and its names."""

    model: bytes
    feed_names: list[str]
    n_forward_outputs: int
    grad_names: list[str]


def build_training_graph(
    onx: onnx.ModelProto, weights: list[str], inputs: list[str] | None = None
) -> TrainingGraph:
    """Build the forward/backward graph of ``onx`` (one output) for its ``weights``.

    The weights become graph inputs: the trainer owns them as OrtValues and feeds them.
    ``inputs`` names the inputs whose gradient the graph also computes (none by default).
    Large ``ReluGrad`` and bias-sum nodes take faster forms
    (:mod:`ortbench.training.gradients.kernel_forms`).
    """
    check_training_build()
    model = prepare_for_gradient_builder(weights_as_inputs(onx, weights))
    config = capi.OrtModuleGraphBuilderConfiguration()
    config.initializer_names = weights
    config.initializer_names_to_train = weights
    config.input_names_require_grad = list(inputs or [])
    config.build_gradient_graph = True
    quiet_logs()
    builder = capi.OrtModuleGraphBuilder()
    try:
        builder.initialize(fit_runtime(model).SerializeToString(), config)
        builder.build(capi.TrainingGraphTransformerConfiguration())
    except RuntimeError as e:
        raise gradient_builder_error(e, model) from None
    info = builder.get_graph_info()
    gradient_model = onnx.load_model_from_string(builder.get_gradient_model())
    rewrite_gradient_kernels(gradient_model)
    feeds = [i.name for i in gradient_model.graph.input]
    return TrainingGraph(
        model=fit_runtime(gradient_model).SerializeToString(),
        feed_names=feeds,
        n_forward_outputs=len(info.user_output_names) + len(info.frontier_node_arg_map),
        grad_names=list(info.initializer_grad_names_to_train),
    )
