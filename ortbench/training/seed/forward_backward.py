"""The seed's forward/backward wrapper of a model, ``OrtGradientForwardBackward``.

onnxcustom trained with it before its optimizer classes existed, and its users call it the
way torch's autograd functions are called: :meth:`OrtGradientForwardBackward.new_instance`
gives an object whose ``forward`` runs the model (on onnxruntime-training's TrainingAgent
when ``training=True``) and whose ``backward`` takes the gradient of the outputs and
returns the gradient of every input and trained weight. The trainers do not use it: their
steps (:mod:`ortbench.training.steps.agent`) bind every run once per fit.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime

from ..errors import OrtBenchError
from ..gradients.derivative import build_training_graph
from ..graphs.loading import fit_runtime
from ..graphs.weights import trainable_initializers, weights_as_inputs
from ..runtime import capi
from ..runtime.devices import ort_device
from .behaviour import LOGGER

_DEVICES = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda"}


def _device_name(providers, device_index: int) -> str:
    """The device (``'cpu'``, ``'cuda:N'``) of the seed's ``providers`` argument."""
    if providers in (None, "cpu"):
        return "cpu"
    if providers in ("cuda", "cuda:0", "gpu"):
        return f"cuda:{device_index}"
    names = [providers] if isinstance(providers, str) else list(providers)
    unknown = [p for p in names if p not in _DEVICES]
    if unknown or not names:
        raise OrtBenchError(
            f"providers must be 'cpu', 'cuda' or a list of CPUExecutionProvider and "
            f"CUDAExecutionProvider, got {providers!r}"
        )
    return "cpu" if _DEVICES[names[0]] == "cpu" else f"cuda:{device_index}"


class OrtGradientForwardBackwardFunction:
    """One forward/backward use of a model, made by
    :meth:`OrtGradientForwardBackward.new_instance`.

    The class attributes (the seed's names) describe the model: ``_input_names``,
    ``_output_names``, ``_weights_to_train``, ``_grad_input_names`` (inputs then weights,
    the order ``forward`` takes), ``_bw_fetches_names`` (their gradients, the order
    ``backward`` returns), ``_sess_eval`` (an InferenceSession taking the weights as
    inputs), ``_trained_onnx`` (the forward/backward graph), ``_optimized_pre_grad_model``
    (the graph ``_sess_eval`` runs) and ``_training_agent``.
    """

    _device: capi.OrtDevice
    _training_agent: object
    _sess_eval: object

    def __init__(self):
        self._state = None
        self._output_shapes: list[tuple] = []

    def _to_ort(self, tensors) -> capi.OrtValueVector:
        """``tensors`` (OrtValues, an OrtValueVector or numpy arrays) as an OrtValueVector."""
        if isinstance(tensors, capi.OrtValueVector):
            return tensors
        values = []
        for tensor in tensors:
            if isinstance(tensor, np.ndarray):
                tensor = capi.OrtValue.ortvalue_from_numpy(tensor, self._device)
            elif isinstance(tensor, onnxruntime.OrtValue):
                tensor = tensor._ortvalue
            values.append(tensor)
        return capi.value_vector(values)

    def forward(self, inputs, training: bool = False, forward_outputs_cache=None):
        """Run the model on ``inputs`` and the weights.

        Parameters
        ----------
        inputs : list or OrtValueVector
            The model's inputs then the trained weights (``_grad_input_names``' order), as
            OrtValues or numpy arrays.
        training : bool
            Keep what :meth:`backward` needs (the TrainingAgent's forward pass).
        forward_outputs_cache : None
            Kept for the seed's signature.

        Returns
        -------
        OrtValueVector
            The model's outputs.
        """
        feeds = self._to_ort(inputs)
        if len(feeds) != len(self._grad_input_names):
            raise OrtBenchError(
                f"forward takes {len(self._grad_input_names)} values "
                f"({self._grad_input_names}), got {len(feeds)}"
            )
        outputs = capi.OrtValueVector()
        if training:
            self._state = capi.PartialGraphExecutionState()
            self._training_agent.run_forward(feeds, outputs, self._state, None)
            self._output_shapes = [tuple(v.shape()) for v in outputs]
        else:
            binding = capi.Binding(self._sess_eval._sess)
            for name, value in zip(self._grad_input_names, feeds):
                binding.bind_input(name, value)
            for name in self._output_names:
                binding.bind_output_to(name, self._device)
            binding.run()
            outputs = capi.value_vector(binding.outputs())
        return outputs

    def backward(self, grad_outputs, backward_outputs_cache=None):
        """The gradients of the last ``forward(..., training=True)``.

        Parameters
        ----------
        grad_outputs : list or OrtValueVector
            The gradient of each output. One with the output's size but another shape
            (a flattened gradient, as the seed accepted) is read in the output's shape.
        backward_outputs_cache : None
            Kept for the seed's signature.

        Returns
        -------
        OrtValueVector
            The gradient of every input, then of every trained weight
            (``_bw_fetches_names``).

        Raises
        ------
        OrtBenchError
            Before a forward pass with ``training=True``, or for a gradient whose size is
            not its output's.
        """
        if self._state is None:
            raise OrtBenchError("backward needs a forward(..., training=True) first")
        grads, arrays = [], []  # arrays: the reshaped gradients' memory, kept until the run
        for grad, shape in zip(self._to_ort(grad_outputs), self._output_shapes):
            if tuple(grad.shape()) != shape:
                array = grad.numpy()
                if array.size != int(np.prod(shape)):
                    raise OrtBenchError(
                        f"the gradient of an output shaped {list(shape)} has shape "
                        f"{list(array.shape)}"
                    )
                array = np.ascontiguousarray(array.reshape(shape))
                arrays.append(array)
                grad = capi.OrtValue.ortvalue_from_numpy(array, self._device)
            grads.append(grad)
        outputs = capi.OrtValueVector()
        self._training_agent.run_backward(capi.value_vector(grads), outputs, self._state)
        self._state = None
        return outputs


class OrtGradientForwardBackward:
    """The forward and backward passes of an ONNX model with respect to its inputs and
    the weights to train, on onnxruntime-training's TrainingAgent.

    Parameters
    ----------
    onnx_model : onnx.ModelProto
        The model.
    weights_to_train : list of str, optional
        The initializers to differentiate; None: every trainable float initializer.
    input_names, output_names : list of str, optional
        The model's inputs and outputs (None: all of them).
    class_name : str, optional
        The name of the class :attr:`cls_type_`.
    sess_options, provider_options, run_options, graph_builder_config
        Kept for the seed's signature.
    providers : str or list, optional
        ``'cpu'``, ``'cuda'``, or execution provider names (CPU by default).
    device_index : int
        The CUDA device.
    enable_logging : bool
        Log the names and graphs to the ``ortbench.seed`` logger.
    debug : bool
        Kept for the seed's signature.

    Raises
    ------
    OrtBenchError
        For unknown providers or weights, or a model onnxruntime-training cannot
        differentiate.
    """

    def __init__(
        self,
        onnx_model: onnx.ModelProto,
        weights_to_train: list[str] | None = None,
        input_names: list[str] | None = None,
        output_names: list[str] | None = None,
        class_name: str | None = None,
        sess_options=None,
        providers=None,
        provider_options=None,
        run_options=None,
        graph_builder_config=None,
        device_index: int = 0,
        enable_logging: bool = False,
        debug: bool = False,
    ):
        self.onnx_model = onnx_model
        self.weights_to_train = (
            trainable_initializers(onnx_model) if weights_to_train is None else weights_to_train
        )
        self.input_names = input_names or [i.name for i in onnx_model.graph.input]
        self.output_names = output_names or [o.name for o in onnx_model.graph.output]
        self.class_name = class_name or f"OrtGradientForwardBackwardFunction_{id(self)}"
        self.sess_options = sess_options
        self.providers = providers
        self.provider_options = provider_options
        self.run_options = run_options
        self.graph_builder_config = graph_builder_config
        self.device_index = device_index
        self.enable_logging = enable_logging
        self.debug = debug
        initializers = {i.name for i in onnx_model.graph.initializer}
        missing = [w for w in self.weights_to_train if w not in initializers]
        if missing:
            raise OrtBenchError(f"weights_to_train names no initializer of the model: {missing}")
        self._device_name = _device_name(providers, device_index)
        self._init_next()

    def _init_next(self) -> None:
        """Build the graphs, the sessions and :attr:`cls_type_`."""
        weights, inputs = list(self.weights_to_train), list(self.input_names)
        graph = build_training_graph(self.onnx_model, weights, inputs=inputs)
        trained = onnx.load_model_from_string(graph.model)
        bw_names = [f"{i}_grad" for i in inputs] + list(graph.grad_names)
        produced = {o.name for o in trained.graph.output}
        absent = [name for name in bw_names if name not in produced]
        if absent:
            raise OrtBenchError(f"onnxruntime-training gave no gradient {absent}")
        device = ort_device(self._device_name)
        provider = "CUDAExecutionProvider" if device.device_type() != device.cpu() else None
        providers = [provider, "CPUExecutionProvider"] if provider else ["CPUExecutionProvider"]
        session = capi.make_session(graph.model, onnxruntime.SessionOptions(), providers)
        agent = capi.TrainingAgent(
            session, graph.feed_names, [device], bw_names, [device] * len(bw_names), 0
        )
        evaluated = fit_runtime(weights_as_inputs(self.onnx_model, weights))
        sess_eval = onnxruntime.InferenceSession(evaluated.SerializeToString(), providers=providers)
        if self.enable_logging:
            LOGGER.info(
                "[OrtGradientForwardBackward] input_names=%r output_names=%r weights_to_train=%r",
                inputs,
                self.output_names,
                weights,
            )
        attributes = {
            "__doc__": "One forward/backward use of a model (OrtGradientForwardBackward).",
            "__module__": OrtGradientForwardBackwardFunction.__module__,
            "_device": device,
            "_input_names": inputs,
            "_output_names": list(self.output_names),
            "_weights_to_train": weights,
            "_grad_input_names": list(graph.feed_names),
            "_onx_inp": list(graph.feed_names),
            "_onx_out": bw_names,
            "_bw_fetches_names": bw_names,
            "_sess_eval": sess_eval,
            "_trained_onnx": trained,
            "_optimized_pre_grad_model": evaluated,
            "_training_agent": agent,
            "_training_session": session,
            "_logger": LOGGER if self.enable_logging else None,
            "_debug": self.debug,
        }
        self.cls_type_ = type(self.class_name, (OrtGradientForwardBackwardFunction,), attributes)

    def new_instance(self) -> OrtGradientForwardBackwardFunction:
        """An object whose ``forward`` and ``backward`` run the model."""
        return self.cls_type_()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "cls_type_"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_next()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(...)"
