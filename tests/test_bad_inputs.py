"""Every input of issue 14: a one-line OrtBenchError naming what to change, or correct
training where the input is legitimate (and was silently mistrained or refused before)."""

from __future__ import annotations

import os
import warnings

import numpy as np
import onnx
import onnxruntime
import pandas as pd
import pytest
import scipy.sparse
from onnx import TensorProto, helper, numpy_helper
from skl2onnx import to_onnx
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.preprocessing import StandardScaler

from ortbench.training import (
    ElasticLearningLoss,
    ElasticLearningPenalty,
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
    NegLogLearningLoss,
    OrtBenchError,
    add_loss_output,
)

F, B = FullTrainer, ForwardBackwardTrainer
W = numpy_helper.from_array(np.linspace(-1, 1, 5, dtype=np.float32).reshape(5, 1), "W")


def linear(nodes=None, inputs=None, outputs=None, inits=None) -> onnx.ModelProto:
    """X (n, 5) -> Y = X @ W (n, 1) unless told otherwise."""
    graph = helper.make_graph(
        nodes or [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        "linear",
        inputs or [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 5])],
        outputs or [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])],
        [W] if inits is None else inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def renamed_input(name):
    model = linear()
    model.graph.input[0].name = name
    model.graph.node[0].input[0] = name
    return model


def typed(elem_type, np_type):
    """Input, weight and output of another element type."""
    weight = numpy_helper.from_array(numpy_helper.to_array(W).astype(np_type), "W")
    return linear(
        inputs=[helper.make_tensor_value_info("X", elem_type, [None, 5])],
        outputs=[helper.make_tensor_value_info("Y", elem_type, [None, 1])],
        inits=[weight],
    )


def non_float_input(elem_type):
    nodes = [
        helper.make_node("Cast", ["X"], ["Xf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["Xf", "W"], ["Y"]),
    ]
    return linear(nodes, inputs=[helper.make_tensor_value_info("X", elem_type, [None, 5])])


def from_torch(model):
    """The model as torch's exporter labels what it writes."""
    model.producer_name = "pytorch"
    return model


def weight_inside_if():
    then = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [None, 1])],
    )
    other = helper.make_graph(
        [helper.make_node("ReduceSum", ["X", "axis"], ["e"], keepdims=1)],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [None, 1])],
    )
    nodes = [
        helper.make_node("ReduceSum", ["X"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["Y"], then_branch=then, else_branch=other),
    ]
    inits = [
        W,
        numpy_helper.from_array(np.array(0, np.float32), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "axis"),
    ]
    return linear(nodes, inits=inits)


def no_input_shape():
    model = linear()
    model.graph.input[0].type.tensor_type.ClearField("shape")
    return model


def own_loss(declared, keepdims):
    """A model that outputs its own loss, mean((X @ W - label)^2), computed with
    ``keepdims`` and declared with shape ``declared``."""
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["Y"]),
        helper.make_node("Sub", ["Y", "label"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["loss"], keepdims=keepdims),
    ]
    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 5]),
        helper.make_tensor_value_info("label", TensorProto.FLOAT, [None, 1]),
    ]
    outputs = [
        helper.make_tensor_value_info("loss", TensorProto.FLOAT, declared),
        helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1]),
    ]
    return linear(nodes, inputs, outputs)


def with_external_data(folder, location="w.bin"):
    """``linear()`` saved in ``folder`` with its weight in an external file."""
    os.makedirs(folder, exist_ok=True)
    model = linear()
    path = os.path.join(folder, "model.onnx")
    onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    if location != "w.bin":  # point the model at another file
        model = onnx.load(path, load_external_data=False)
        for entry in model.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
    return path


def data(regression):
    X, y = regression
    return X, y


def fit(trainer, model, X, y, **params):
    fit_params = {k: params.pop(k) for k in list(params) if k == "sample_weight"}
    return trainer(model, max_iter=2, **params).fit(X, y, **fit_params)


def set_nan_state(X, y):
    model = fit(B, linear(), X, y)
    model.set_state({"W": np.full((5, 1), np.nan, np.float32)})


def hinge(X, y):
    labels = (y > np.median(y)).astype(int)
    onx = to_onnx(SGDClassifier(max_iter=5).fit(X, labels), X[:1])
    fit(F, onx, X, labels)


def wrong_probability_function(X, y):
    labels = (y > np.median(y)).astype(int)
    onx = to_onnx(LogisticRegression().fit(X, labels), X[:1], options={"zipmap": False})
    fit(B, onx, X, labels, learning_loss=NegLogLearningLoss("softmax"))


def outside(tmp_path):
    path = with_external_data(tmp_path / "model", "../w.bin")
    os.replace(tmp_path / "model" / "w.bin", tmp_path / "w.bin")
    return path


def symlinked(tmp_path):
    path = with_external_data(tmp_path / "model")
    os.replace(tmp_path / "model" / "w.bin", tmp_path / "real.bin")
    os.symlink(tmp_path / "real.bin", tmp_path / "model" / "w.bin")
    return path


def pandas_with_na(X):
    frame = pd.DataFrame(X).astype("Float32")
    frame.iloc[0, 0] = pd.NA
    return frame


#: (input, what the user does with X, y and a temporary folder, the message's regex)
REFUSED = [
    (
        "weight only inside If",
        lambda X, y, t: fit(B, weight_inside_if(), X, y),
        r"'W' is read only inside the subgraph of If .*leave it out of weights_to_train",
    ),
    (
        "int64 data input",
        lambda X, y, t: fit(B, non_float_input(TensorProto.INT64), X, y),
        r"feeds one float input, the model reads 'X' \(int64\): convert it with a single float",
    ),
    (
        "int64 data input exported from torch",
        lambda X, y, t: fit(B, from_torch(non_float_input(TensorProto.INT64)), X, y),
        r"the model reads 'X' \(int64\): export a module whose forward takes one float tensor "
        r"\(cast indices inside it",
    ),
    (
        "string data input",
        lambda X, y, t: fit(F, non_float_input(TensorProto.STRING), X, y),
        r"'X' \(string\): convert it with a single float tensor input",
    ),
    (
        "two float data inputs",
        lambda X, y, t: fit(
            B,
            linear(
                [
                    helper.make_node("MatMul", ["X", "W"], ["P"]),
                    helper.make_node("Add", ["P", "Z"], ["Y"]),
                ],
                [
                    helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, k])
                    for n, k in (("X", 5), ("Z", 1))
                ],
            ),
            X,
            y,
        ),
        r"the model reads 'X' \(float\), 'Z' \(float\): convert it with a single",
    ),
    (
        "double weights",
        lambda X, y, t: fit(B, typed(TensorProto.DOUBLE, np.float64), X, y),
        r"weight 'W' is float64: ortbench trains float32 weights; convert the model in float32",
    ),
    (
        "double weights exported from torch",
        lambda X, y, t: fit(F, from_torch(typed(TensorProto.DOUBLE, np.float64)), X, y),
        r"weight 'W' is float64: .*export the module in float32 \(module.float\(\)\)",
    ),
    (
        "float16 weights",
        lambda X, y, t: fit(F, typed(TensorProto.FLOAT16, np.float16), X, y),
        r"weight 'W' is float16: .*convert the model in float32",
    ),
    (
        "1-D output",
        lambda X, y, t: fit(
            B,
            linear(
                inits=[numpy_helper.from_array(np.ones(5, np.float32), "W")],
                outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None])],
            ),
            X,
            y,
        ),
        r"output 'Y' has shape \(n\): .*make it \(n, 1\)",
    ),
    (
        "input without a shape",
        lambda X, y, t: fit(B, no_input_shape(), X, y),
        r"input 'X' has shape unknown: .*input of shape \[None, n_features\]",
    ),
    (
        "score before fit",
        lambda X, y, t: B(linear()).score(X, y),
        r"not fitted yet: call fit first",
    ),
    ("predict before fit", lambda X, y, t: F(linear()).predict(X), r"not fitted yet: call fit"),
    (
        "predict with the wrong width",
        lambda X, y, t: fit(B, linear(), X, y).predict(X[:, :2]),
        r"X has 2 features, the model expects 5",
    ),
    (
        "learning_loss as a string",
        lambda X, y, t: fit(B, linear(), X, y, learning_loss="log"),
        r"learning_loss must be a BaseLearningLoss object such as NegLogLearningLoss\(\)",
    ),
    (
        "learning_penalty as a string",
        lambda X, y, t: fit(B, linear(), X, y, learning_penalty="l2"),
        r"learning_penalty must be a BaseLearningPenalty object such as ElasticLearningPenalty",
    ),
    (
        "learning_rate as a string",
        lambda X, y, t: fit(F, linear(), X, y, learning_rate="constant"),
        r"learning_rate must be a LearningRateSGD-like object",
    ),
    (
        "negative penalty",
        lambda X, y, t: fit(B, linear(), X, y, learning_penalty=ElasticLearningPenalty(l1=-1)),
        r"penalty l1 must be a finite number >= 0, got -1",
    ),
    (
        "negative loss weight",
        lambda X, y, t: fit(B, linear(), X, y, learning_loss=ElasticLearningLoss(l2_weight=-0.5)),
        r"l2_weight must be a finite number >= 0, got -0.5",
    ),
    (
        "negative full-training penalty",
        lambda X, y, t: fit(F, linear(), X, y, penalty={"W": {"l2": -1.0}}),
        r"penalty l2 must be a finite number >= 0",
    ),
    (
        "unknown penalty key l3",
        lambda X, y, t: fit(F, linear(), X, y, penalty={"W": {"l3": 1.0}}),
        r"penalty on 'W': unknown key\(s\) \['l3'\], expected a dict with 'l1' and/or 'l2'",
    ),
    (
        "set_state with NaN",
        lambda X, y, t: set_nan_state(X, y),
        r"weight 'W' contains NaN or infinity",
    ),
    (
        "add_loss_output with an unknown output_name",
        lambda X, y, t: add_loss_output(linear(), output_name="nope"),
        r"unknown output_name 'nope': the model's outputs are \['Y'\]",
    ),
    (
        "add_loss_output label_name clash",
        lambda X, y, t: add_loss_output(linear(), label_name="X"),
        r"label_name='X' is already a tensor of the model: choose another name",
    ),
    (
        "add_loss_output loss_name clash",
        lambda X, y, t: add_loss_output(linear(), loss_name="Y"),
        r"loss_name='Y' is already a tensor of the model: choose another name",
    ),
    (
        "loss output declared (1, 1), computed scalar",
        lambda X, y, t: fit(F, own_loss([1, 1], keepdims=0), X, y),
        r"declared shapes contradict its nodes .*: fix or remove the declared shapes",
    ),
    (
        "per-sample loss output",
        lambda X, y, t: fit(
            F,
            linear(
                [
                    helper.make_node("MatMul", ["X", "W"], ["Y"]),
                    helper.make_node("Sub", ["Y", "label"], ["loss"]),
                ],
                [
                    helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, k])
                    for n, k in (("X", 5), ("label", 1))
                ],
                [
                    helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 1])
                    for n in ("loss", "Y")
                ],
            ),
            X,
            y,
        ),
        r"loss output 'loss' has shape \[.*\]: a loss must be one value per batch",
    ),
    (
        "inconsistent declared shape",
        lambda X, y, t: fit(
            B,
            linear(outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 2, 3])]),
            X,
            y,
        ),
        r"declared shapes contradict its nodes .*: fix or remove the declared shapes",
    ),
    (
        "sparse X",
        lambda X, y, t: fit(B, linear(), scipy.sparse.csr_matrix(X), y),
        r"X is a sparse matrix: pass a dense array \(X.toarray\(\)\)",
    ),
    (
        "complex X",
        lambda X, y, t: fit(B, linear(), X + 1j, y),
        r"X is complex: pass its real part or its magnitude",
    ),
    (
        "pandas nullable column with NA",
        lambda X, y, t: fit(B, linear(), pandas_with_na(X), y),
        r"X contains NaN or infinity",
    ),
    (
        "X beyond float32's range",
        lambda X, y, t: fit(B, linear(), X.astype(np.float64) * 1e39, y),
        r"X holds values beyond float32's range \(largest magnitude .*e\+39, float32's 3.4e\+38\)",
    ),
    (
        "all-zero sample weights",
        lambda X, y, t: fit(B, linear(), X, y, sample_weight=0 * y),
        r"sample_weight is zero everywhere: nothing would be trained",
    ),
    (
        "sample weights whose sum overflows",
        lambda X, y, t: fit(F, linear(), X, y, sample_weight=np.full(len(y), 1e38)),
        r"sample_weight sums beyond float32's range: divide the weights by their maximum",
    ),
    (
        "external data outside the model's folder",
        lambda X, y, t: fit(F, outside(t), X, y),
        r"stored in '../w.bin', outside the model's folder: move the data file next to",
    ),
    (
        "external data symlinked outside",
        lambda X, y, t: fit(B, symlinked(t), X, y),
        r"stored in 'w.bin', outside the model's folder",
    ),
    (
        "external data of a model given as bytes",
        lambda X, y, t: fit(
            B,
            onnx.load(with_external_data(t / "m"), load_external_data=False).SerializeToString(),
            X,
            y,
        ),
        r"external file: give the model by the path of its .onnx file",
    ),
    (
        "hinge classifier with the log loss",
        lambda X, y, t: hinge(X, y),
        r"holds decision scores, not probabilities .*convert a classifier that has predict_proba",
    ),
    (
        "probability_function that the graph contradicts",
        lambda X, y, t: wrong_probability_function(X, y),
        r"with a sigmoid, not probability_function='softmax': leave it None or set 'sigmoid'",
    ),
]


@pytest.mark.parametrize(("what", "call", "match"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_with_one_line(what, call, match, regression, tmp_path):
    X, y = regression
    with pytest.raises(OrtBenchError, match=match) as info:
        call(X, y, tmp_path)
    assert "\n" not in str(info.value), what


def _same_training(a, b, X, y, **params):
    """Fit both models alike; their weights and predictions must agree."""
    settings = dict(learning_rate=LearningRateSGD(0.01), shuffle=False, max_iter=3, **params)
    trainer = settings.pop("trainer", B)
    first, second = trainer(a, **settings).fit(X, y), trainer(b, **settings).fit(X, y)
    for name, value in first.get_state().items():
        np.testing.assert_allclose(second.get_state()[name], value, rtol=1e-6)
    np.testing.assert_allclose(second.predict(X), first.predict(X), rtol=1e-6)
    return first, second


def test_divergence_on_the_last_update_raises_and_keeps_finite_weights(regression):
    X, y = regression
    before = linear()
    model = B(
        before, max_iter=1, batch_size=len(X), shuffle=False, learning_rate=LearningRateSGD(1e20)
    )
    with pytest.raises(OrtBenchError, match=r"diverged at epoch 1: its last update left weights"):
        model.fit(X, y * 1e3)  # the epoch's loss, taken before the update, is finite
    np.testing.assert_array_equal(model.get_state()["W"], numpy_helper.to_array(W))
    assert np.isfinite(model.predict(X)).all()


def test_warm_start_follows_a_new_learning_rate(regression):
    X, y = regression
    model = B(linear(), learning_rate=LearningRateSGD(0.01), shuffle=False, max_iter=2)
    model.set_params(warm_start=True).fit(X, y)
    start = model.get_trained_onnx()
    model.set_params(learning_rate=LearningRateSGD(0.05)).fit(X, y)
    assert model.learning_rate_.value == 0.05
    fresh = B(start, learning_rate=LearningRateSGD(0.05), shuffle=False, max_iter=2).fit(X, y)
    np.testing.assert_allclose(model.get_state()["W"], fresh.get_state()["W"], rtol=1e-6)


def test_warm_start_says_momentum_restarts_with_a_new_learning_rate(regression):
    X, y = regression
    rate = LearningRateSGDNesterov(0.01)
    model = B(linear(), learning_rate=rate, max_iter=1, warm_start=True).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.set_params(batch_size=20).fit(X, y)  # rebuilt, momentum kept: no warning
    with pytest.warns(UserWarning, match=r"optimizer state \(momentum\) restarts from zero"):
        model.set_params(learning_rate=LearningRateSGDNesterov(0.02)).fit(X, y)
    assert model.learning_rate_.value == 0.02


def test_warm_start_after_a_failed_first_fit_starts_afresh(regression):
    X, y = regression
    model = B(linear(), warm_start=True, max_iter=2)
    with pytest.raises(OrtBenchError):
        model.fit(X[:, :2], y)
    assert model.fit(X, y).n_iter_ == 2


@pytest.mark.parametrize("trainer", [F, B])
def test_a_refused_fit_leaves_the_fitted_trainer_as_it_was(regression, trainer):
    """A second fit refused after it read its new model (or labels) must not leave the
    trainer half changed: the old weights under the new graph predicted silently."""
    X, y = regression
    relu = linear(
        [helper.make_node("MatMul", ["X", "W"], ["Z"]), helper.make_node("Relu", ["Z"], ["Y"])]
    )
    model = trainer(relu, max_iter=2).fit(X, y)
    predicted, exported = model.predict(X), model.get_trained_onnx()
    model.set_params(model_onnx=linear())
    with pytest.raises(OrtBenchError, match="y has"):
        model.fit(X, y[:-1])
    np.testing.assert_array_equal(model.predict(X), predicted)
    assert model.get_trained_onnx().SerializeToString() == exported.SerializeToString()
    with pytest.raises(OrtBenchError, match=r"^X_val without y_val: give both"):
        model.fit(X, y, X_val=X)
    np.testing.assert_array_equal(model.predict(X), predicted)
    assert model.fit(X, y).n_iter_ == 2  # and the new model trains
    # Ctrl-C while a refit builds its sessions: the trainer is the fitted one still
    fitted, fitted_model = model.predict(X), model.model_
    model.set_params(model_onnx=relu)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    model._build_around = interrupted
    with pytest.raises(KeyboardInterrupt):
        model.fit(X, y)
    del model._build_around
    assert model.model_ is fitted_model  # not the relu graph the refit prepared
    np.testing.assert_array_equal(model.predict(X), fitted)
    # a classifier keeps its classes and its probabilities
    Xc, yc = load_breast_cancer(return_X_y=True)
    Xc = StandardScaler().fit_transform(Xc).astype(np.float32)
    yc = np.where(yc == 1, 2, np.arange(len(yc)) % 2)  # three classes
    onx = to_onnx(LogisticRegression(max_iter=5).fit(Xc, yc), Xc[:1], options={"zipmap": False})
    classifier = trainer(onx, max_iter=1).fit(Xc, yc)
    proba = classifier.predict_proba(Xc)
    with pytest.raises(OrtBenchError, match="2 classes"):
        classifier.fit(Xc, yc % 2)
    np.testing.assert_array_equal(classifier.classes_, [0, 1, 2])
    np.testing.assert_array_equal(classifier.predict_proba(Xc), proba)


@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("trainer", [F, B])
def test_ctrl_c_in_an_epoch_undoes_it(regression, trainer, backend):
    """Ctrl-C while an epoch runs: the weights had taken its steps while the counters left
    it out. The epoch is undone (weights, momentum, rate, counters, the rows' order): the
    trainer holds what two epochs give, and a warm start then trains the two left exactly
    as one four-epoch fit does."""
    X, y = regression
    params = dict(max_iter=4, batch_size=8, shuffle=True, random_state=0, backend=backend)
    params["intra_op_threads"] = 1  # the same sums in every fit
    on_device = trainer is F and backend == "ort-training"  # no momentum there
    rate = LearningRateSGD if on_device else LearningRateSGDNesterov
    params["learning_rate"] = rate(0.05, learning_rate="invscaling")
    whole = trainer(linear(), **params).fit(X, y)
    two = trainer(linear(), **{**params, "max_iter": 2}).fit(X, y)
    model = trainer(linear(), **params)
    calls = []

    def interrupted_in_epoch_3(loader):
        calls.append(1)
        loss = type(model)._run_epoch(model, loader)  # its steps taken, then Ctrl-C
        if len(calls) == 3:
            raise KeyboardInterrupt
        return loss

    model._run_epoch = interrupted_in_epoch_3
    with pytest.raises(KeyboardInterrupt, match=r"in epoch 3, which is undone: .* \(n_iter_ = 2\)"):
        model.fit(X, y)
    del model._run_epoch
    assert model.n_iter_ == 2 and model.t_ == two.t_
    assert model.train_losses_ == two.train_losses_
    for name, value in two.get_state().items():
        np.testing.assert_array_equal(model.get_state()[name], value, err_msg=name)
    model.set_params(max_iter=2, warm_start=True).fit(X, y)
    # to rounding: the interrupt came after the epoch's last step here, so the weights
    # go on from the other buffer of the pair (the momentum update rounds by 1e-6 there)
    np.testing.assert_allclose(model.train_losses_, whole.train_losses_, rtol=1e-5)
    for name, value in whole.get_state().items():
        np.testing.assert_allclose(model.get_state()[name], value, rtol=1e-5, err_msg=name)


@pytest.mark.parametrize("trainer", [F, B])
def test_a_dataframes_column_names_are_the_fits(regression, trainer):
    """Columns reordered after the fit were read by position: silently wrong predictions.
    As scikit-learn does, the fit keeps the names and later data must match them."""
    X, y = regression
    frame = pd.DataFrame(X, columns=list("abcde"))
    model = trainer(linear(), max_iter=2).fit(frame, y)
    np.testing.assert_array_equal(model.feature_names_in_, list("abcde"))
    np.testing.assert_array_equal(model.predict(frame), model.predict(X))  # arrays: by position
    with pytest.raises(OrtBenchError, match=r"another order\): select them as the fit saw them"):
        model.predict(frame[list("edcba")])
    with pytest.raises(OrtBenchError, match=r"missing \['e'\], not seen in fit \['z'\]"):
        model.score(frame.rename(columns={"e": "z"}), y)
    with pytest.raises(OrtBenchError, match="not the fit's"):
        model.fit(frame, y, X_val=frame[list("edcba")], y_val=y)
    assert not hasattr(model.fit(X, y), "feature_names_in_")  # a fit on an array forgets them


def test_external_data_is_read_next_to_the_model(regression, tmp_path, monkeypatch):
    X, y = regression
    path = with_external_data(tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.bin").write_bytes(b"\x00" * 64)  # a decoy in the working directory
    for trainer in (F, B):
        _same_training(linear(), path, X, y, trainer=trainer)


def test_unused_string_input_listed_first_is_ignored(regression):
    X, y = regression
    model = linear()
    model.graph.input.insert(
        0, helper.make_tensor_value_info("names", TensorProto.STRING, [None, 1])
    )
    _same_training(linear(), model, X, y)


def test_the_first_of_two_float_outputs_is_trained(regression):
    X, y = regression
    nodes = [helper.make_node("MatMul", ["X", "W"], ["Y"]), helper.make_node("Neg", ["Y"], ["Z"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 1]) for n in "YZ"]
    _, model = _same_training(linear(), linear(nodes, outputs=outputs), X, y)
    assert model.output_name_ == "Y"


@pytest.mark.parametrize("name", ["label", "loss_scale", "loss"])
def test_full_trainer_input_named_like_its_own_tensors(regression, name):
    X, y = regression
    _same_training(linear(), renamed_input(name), X, y, trainer=F)


def test_a_loss_output_kept_with_its_dimensions_is_trained(regression):
    X, y = regression
    _same_training(own_loss([], keepdims=0), own_loss([1, 1], keepdims=1), X, y, trainer=F)


def test_logistic_regression_converted_at_opset_9_trains(regression):
    X, y = regression
    labels = (y > np.median(y)).astype(np.int64)
    onx = to_onnx(LogisticRegression().fit(X, labels), X[:1])
    assert min(o.version for o in onx.opset_import if o.domain == "") < 13
    for trainer in (F, B):
        model = trainer(onx, max_iter=2).fit(X, labels)
        trained = model.get_trained_onnx()
        onnx.checker.check_model(trained)
        got = onnxruntime.InferenceSession(trained.SerializeToString()).run(None, {"X": X})
        np.testing.assert_array_equal(model.predict(X), got[0])
        proba = np.array([[row[k] for k in sorted(row)] for row in got[1]])  # ZipMap
        np.testing.assert_allclose(model.predict_proba(X), proba, rtol=1e-5)
        assert model.score(X, labels) > 0.8


@pytest.mark.parametrize("trainer", [F, B])
def test_classifier_graph_trains_with_the_log_loss_by_default(trainer):
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X).astype(np.float32)
    onx = to_onnx(LogisticRegression(max_iter=1).fit(X, y), X[:1])  # ZipMap
    model = trainer(onx, max_iter=3).fit(X, y)
    assert model.learning_loss_.probability_function == "sigmoid"
    assert set(model.predict(X)) == {0, 1}
    assert model.score(X, y) > 0.9


def test_add_loss_output_on_a_classifier_picks_a_free_label_name():
    X, y = load_breast_cancer(return_X_y=True)
    onx = to_onnx(LogisticRegression(max_iter=1).fit(X, y), X[:1].astype(np.float32))
    model = add_loss_output(onx, score_name="log")  # skl2onnx's graph outputs 'label'
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input][-1] == "label_1"
