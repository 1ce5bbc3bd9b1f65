"""The benchmark harness: problems, contenders, the comparison matrix and its results."""
