"""numpydoc entries both trainers share, put into their docstrings where
``{model_parameters}``, ``{fit_parameters}`` and ``{attributes}`` stand."""

from __future__ import annotations

import textwrap

#: numpydoc entries both trainers share, put into their docstrings by
#: :func:`shared_docstring` where ``{model_parameters}``, ``{fit_parameters}`` and
#: ``{attributes}`` stand.
SHARED_DOC = {
    "model_parameters": """\
model_onnx : onnx.ModelProto, bytes or path
    The model to train: one data input, float outputs (a classifier's probabilities
    may sit behind a ZipMap). Linear scikit-learn nodes are rewritten into trainable
    MatMul/Add first.
weights_to_train : list of str, optional
    The initializers to train; by default every float initializer that is a parameter
    (see :func:`~ortbench.training.trainable_initializers`) and that the trained output
    is computed from (those only another output reads are left out, with a warning).""",
    "fit_parameters": """\
batch_size : int, default=10
    Rows per step; the last batch of an epoch is padded with rows of weight 0. Clipped,
    with a warning, to the training rows where there are fewer (as in scikit-learn).
max_iter : int, default=100
    Epochs per call to :meth:`fit`.
device : str, default='cpu'
    ``'cpu'``, ``'cuda'`` or ``'cuda:N'``.
shuffle : bool, default=True
    Shuffle the rows before every epoch.
random_state : int, RandomState or None, default=None
    Seeds the shuffling, at each :meth:`fit` that does not warm start.
warm_start : bool, default=False
    A new :meth:`fit` continues from the current weights, optimizer state, schedule and
    sequence of shuffles (also after pickling; a new ``random_state`` seeds it again).
verbose : int, default=0
    Print the loss of every epoch on stderr.
validation_every : int, default=1
    Epochs between two scores of the validation data given to :meth:`fit`.
intra_op_threads : 'auto', int or None, default='auto'
    Intra-op threads of the sessions that run the model: ``'auto'`` runs small steps
    (batch size times trained values below ``ONE_THREAD_WORK``) on one thread; on the
    CPU, steps up to ``TIMED_THREADS_WORK`` run on one thread or on onnxruntime's
    default pool, whichever ran a few batches faster when the fit built them (see
    ``intra_op_threads_``), and larger ones on the pool. None: that pool at any size.
    Pool threads spin between kernels, but in the portable forward/backward steps; the
    small loss and update sessions run on one thread, but with ``'auto'`` the momentum
    update takes the pool where the step runs on one thread and the update's rows (five
    floats per trained value) outgrow one core's L2 cache.""",
    "attributes": """\
model_ : onnx.ModelProto
    The model as trained (linear nodes rewritten).
weights_ : list of str
    The trained weights.
output_name_ : str
    The output the loss reads.
is_classifier_ : bool
    Whether the loss is a log loss (labels are one-hot encoded).
classes_ : numpy.ndarray
    The class labels (classifiers only).
n_features_in_ : int
    The number of features (columns of X) seen by the last fit, the model's input width.
feature_names_in_ : numpy.ndarray
    The column names of X, when the fit's X was a DataFrame with string column names:
    data predicted or validated must come with the same columns, in the same order.
learning_rate_ : BaseLearningRate
    The fitted schedule (a clone of ``learning_rate``).
t_ : int
    Samples seen so far.
train_losses_ : list of float
    The training loss of every epoch (mean over samples, penalty included).
validation_losses_ : list of float
    The validation loss, every ``validation_every`` epochs.
n_iter_ : int
    Epochs run by the last fit (as scikit-learn's MLP counts them: a warm start's
    ``train_losses_`` holds every epoch since the first fit).
intra_op_threads_ : int or None
    The intra-op threads the model's sessions run on (None: onnxruntime's pool), what
    ``intra_op_threads`` gave for this machine and step.""",
}


def shared_docstring(cls: type) -> type:
    """Put the :data:`SHARED_DOC` entries into the docstring of the trainer ``cls``."""
    doc = cls.__doc__
    for name, text in SHARED_DOC.items():
        doc = doc.replace("{" + name + "}", textwrap.indent(text, "    ").lstrip())
    cls.__doc__ = doc
    return cls
