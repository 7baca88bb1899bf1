"""Host time of steady-state training steps, by Python function (cProfile), on the GPU
machine: which calls a host-bound step (run 7's MoE, small dense models) spends its time
in. Usage: python benchmarks/host_profile.py RUN/config.json OUT_DIR [STEPS]
Writes OUT_DIR/host-profile.txt (top functions by own and by cumulative time, and the
steps' wall times with the profiler on); cProfile's own cost inflates Python-heavy calls,
so read it as a ranking, not as absolute times."""

from __future__ import annotations

import cProfile
import io
import json
import pathlib
import pstats
import sys

from fourcast.train.config import RunConfig
from fourcast.train.loop import train


def main() -> None:
    cfg_path, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 14
    d = json.loads(cfg_path.read_text())
    d["train"].update(steps=steps, profile_steps=0, eval_every=0, ckpt_every=0, progress=False)
    prof, walls = cProfile.Profile(), []

    # Profile steps 5 .. steps-1: warm-up and compiles come first, and the last step is
    # followed by the final validation and checkpoint, which run before on_step.
    def on_step(step: int, rec: dict) -> None:
        if step == 4:
            prof.enable()
        elif 4 < step < steps:
            walls.append(rec["step_time_ms"])
        if step == steps - 1:
            prof.disable()

    out.mkdir(parents=True, exist_ok=True)
    train(RunConfig.from_dict(d), out / "run", on_step=on_step)
    n = max(1, steps - 5)
    buf = io.StringIO()
    buf.write(f"{cfg_path}: {n} profiled steps, step ms under cProfile {walls}\n")
    for key in ("tottime", "cumulative"):
        buf.write(f"\n==== by {key} (seconds over {n} steps)\n")
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(45)
    (out / "host-profile.txt").write_text(buf.getvalue())
    print(buf.getvalue()[:3000])


if __name__ == "__main__":
    main()
