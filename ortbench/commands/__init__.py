"""The ``ortbench`` command's commands, one module each (``bench``, ``ab``, ``merge``,
``profile``, ``compare``, ``report``); :mod:`.options` holds the option types they share.

Each module has ``add(commands)``, which adds its parser to the command line's, and
``run(args)``, which runs it and returns its exit status. ``compare`` and ``report`` need
no runtime; the others are imported only when one of them runs (see :mod:`ortbench.cli`).
"""

EXIT_FAILING = 1
EXIT_USAGE = 2
EXIT_NOTHING = 3
EXIT_INCONCLUSIVE = 4
EXIT_INTERRUPTED = 130

#: The commands that need an onnxruntime build, with their help lines.
RUNTIME_COMMANDS = {
    "bench": "run the comparison matrix",
    "ab": "time BASE and HEAD side by side and judge HEAD",
    "merge": "join the run folders of one run's shards",
    "profile": "profile one contender's training run",
}
