"""Reports over benchmark results: the run summary, plots and regression verdicts."""
