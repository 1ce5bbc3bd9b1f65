"""``steps.md``: where a training step's time goes, phase by phase, from onnxruntime's timings.

Each session a trainer creates has a label (``runtime.session_options``); the runs of a
session in the profiled window map to phases. TrainingAgent runs forward and backward in
one session, alternately. What the runs do not cover is time spent outside onnxruntime:
Python, bindings, the per-epoch shuffle.
"""

from __future__ import annotations

#: Session label -> the phase of each of its runs within a step, in order.
PHASES = {
    "ForwardBackwardTrainer_agent": ("forward", "backward"),
    "ForwardBackwardTrainer_loss": ("loss and its gradient",),
    "ForwardBackwardTrainer_epoch_losses": ("losses, once an epoch",),
    "ForwardBackwardTrainer_update": ("update (penalty fused)",),
    "ForwardBackwardTrainer_forward": ("forward",),
    "ForwardBackwardTrainer_backward": ("backward",),
    "FullTrainer_train_step": ("forward, loss and backward",),
    "FullTrainer_optimizer": ("update",),
    "FullTrainer_fused_step": ("forward, loss, backward and update",),
    "FullTrainer_update": ("update",),
    "FullTrainer_epoch_losses": ("losses, once an epoch",),
    "FullTrainer_epoch_loop": ("every step of an epoch, in one run",),
}


#: The phases in the order a step runs them (the losses of an epoch after its steps).
ORDER = (
    "forward",
    "loss and its gradient",
    "backward",
    "forward, loss and backward",
    "forward, loss, backward and update",
    "every step of an epoch, in one run",
    "update (penalty fused)",
    "update",
    "losses, once an epoch",
)


def phase_times(run_times: dict[str, list[float]], steps: int) -> dict[str, float]:
    """Microseconds per step for each phase, from the per-session run durations, in the
    order a step runs the phases."""
    phases: dict[str, float] = {}
    for label, durations in run_times.items():
        if label not in PHASES or not durations:
            continue
        names = PHASES[label]
        for k, duration in enumerate(durations):
            phase = names[k % len(names)]
            phases[phase] = phases.get(phase, 0.0) + duration / steps
    return dict(sorted(phases.items(), key=lambda item: ORDER.index(item[0])))


def steps_markdown(
    run_times: dict[str, list[float]], steps: int, step_us: float, plain_step_us: float
) -> str:
    """The phase table of a profiled window of ``steps`` steps of ``step_us`` each.

    ``plain_step_us`` is the same window's time per step without the profiler, which slows
    every node.
    """
    phases = phase_times(run_times, steps)
    inside = sum(phases.values())
    runs = sum(len(d) for label, d in run_times.items() if label in PHASES) / steps
    per_step = f"{runs:.3g} onnxruntime {'run' if runs == 1 else 'runs'} per step"
    lines = [
        "# Where a step goes",
        "",
        f"{steps} steps after warm-up, {per_step}. Under "
        f"onnxruntime's profiler a step took {step_us:.1f} µs (wall time), the same steps "
        f"without it {plain_step_us:.1f} µs: the profiler's per-node records inflate the runs, so read "
        "the shares. Data are staged as OrtValues once per fit (no per-step copy); the "
        "per-epoch shuffle counts as time outside onnxruntime.",
        "",
        "| phase | µs per step (profiled) | share of the step |",
        "|---|---:|---:|",
    ]
    for phase, us in phases.items():
        lines.append(f"| {phase} | {us:.1f} | {us / step_us:.1%} |")
    outside = max(step_us - inside, 0.0)
    lines.append(f"| outside onnxruntime | {outside:.1f} | {outside / step_us:.1%} |")
    return "\n".join(lines) + "\n"
