"""The benchmarks ``make bench`` runs (``r2s2r bench all``): each one's command, its smaller
``--quick`` variant and the headline figures its page shows.

A bench is one ``r2s2r ... --json`` command line; ``{data}`` in it is a dataset the run
records first (``DATA_FIXTURE``), ``{work}`` the run's scratch folder. A headline names a
figure of the command's JSON by its path (``a.b.0.c``: keys, and digits for list indexes)
and, where the bench measures one, the baseline it measured in the same run; the page
divides the two, or shows the bench's own ratio where it reports the baseline only as one.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from r2s2r.spec.registry import Registry


@dataclass(frozen=True)
class Headline:
    """One figure of a bench's JSON as the page shows it."""

    # What the figure is, as a row label.
    label: str
    # Its path in the bench's JSON (dot-separated keys; digits index a list).
    path: str
    # Its unit ("" for a plain number).
    unit: str = ""
    # The path of the baseline measured in the same run, if any.
    baseline: str | None = None
    # What that baseline is (shown whenever it is set, even without a baseline value).
    baseline_label: str = ""
    # The bench's own figure-over-baseline ratio; without it the page divides the two.
    ratio: str | None = None


@dataclass(frozen=True)
class Bench:
    """One benchmark command of the suite."""

    name: str
    # The command line after ``r2s2r`` (``--json`` included), at ``make bench``'s sizes.
    command: str
    # The same at the smallest sizes (``--quick``); None: left out of a quick run.
    quick: str | None
    # What it measures, one line.
    what: str
    headlines: tuple[Headline, ...]

    def args(self, quick: bool = False) -> list[str]:
        """The command's arguments after ``r2s2r`` (placeholders not filled in)."""
        line = self.quick if quick else self.command
        if line is None:
            raise ValueError(f"bench {self.name!r} has no quick variant")
        return shlex.split(line)

    @property
    def needs_data(self) -> bool:
        """Whether its command reads the recorded dataset fixture."""
        return "{data}" in f"{self.command} {self.quick}"


# The dataset the training and generation benches read: two scripted takes, 64 px views.
DATA_FIXTURE = "record --out {data} --episodes 2 --image-size 64"

BENCHES: Registry[Bench] = Registry("bench")


def add(bench: Bench) -> Bench:
    """Register ``bench`` under its name (a name taken twice raises)."""
    return BENCHES.register(bench.name, bench)


SYNC = "the same policy, sync execution"
NOMINAL = "the nominal world"

add(
    Bench(
        name="sim",
        command="sim bench --json --seconds 2 --warp-sizes 1,8 --warp-render-size 64,64",
        quick="sim bench --json --seconds 0.3 --warp-sizes ''",
        what="env physics and renders against raw MuJoCo; MuJoCo Warp's batches",
        headlines=(
            Headline(
                "physics steps through env.step",
                "env_physics_steps_per_s",
                "steps/s",
                baseline="raw_steps_per_s",
                baseline_label="raw mj_step",
                ratio="env_over_raw",
            ),
            Headline(
                "three-view renders through the env",
                "env_renders_per_s",
                "sets/s",
                baseline="raw_renders_per_s",
                baseline_label="raw mujoco.Renderer, same cameras",
                ratio="render_over_raw",
            ),
            Headline("fisheye remap", "fisheye_remap_ms", "ms"),
            Headline("MuJoCo Warp, 8 worlds", "warp_world_steps_per_s.8", "world-steps/s"),
            Headline(
                "MuJoCo Warp batched renders, 8 worlds at 64 px",
                "warp_render_frame_sets_per_s.8",
                "sets/s",
                baseline="cpu_render_frame_sets_per_s.8",
                baseline_label="CPU renderer, same worlds",
                ratio="warp_render_over_cpu.8",
            ),
        ),
    )
)
add(
    Bench(
        name="rig",
        command="rig bench --json --seconds 0.5",
        quick="rig bench --json --seconds 0.2",
        what="the twin's real-time factor with and without views; recording; retargeting",
        headlines=(
            Headline(
                "twin real-time factor, 256 px views",
                "twin_realtime_factor",
                baseline="raw_render_realtime_factor",
                baseline_label="raw renders of the same views, nothing else",
            ),
            Headline(
                "twin real-time factor, 128 px views",
                "twin_realtime_factor_128px",
                baseline_label="raw renders at 128 px",
                ratio="twin_realtime_factor_128px_vs_raw",
            ),
            Headline(
                "twin real-time factor, 64 px views",
                "twin_realtime_factor_64px",
                baseline_label="raw renders at 64 px",
                ratio="twin_realtime_factor_64px_vs_raw",
            ),
            Headline("twin real-time factor, no views", "twin_realtime_factor_no_cameras"),
            Headline("CPU per control period, 64 px views", "twin_cpu_ms_per_period_64px", "ms"),
            Headline(
                "recording real-time factor, 256 px views",
                "record_realtime_factor",
                baseline="record_realtime_factor_reference_views",
                baseline_label="the reference view path",
                ratio="record_vs_reference_views",
            ),
            Headline("--realtime pacing with views", "realtime_paced_hz_with_views", "Hz"),
            Headline("retargeting", "retarget_hz", "Hz"),
            Headline("retargeting fingertip error, p95", "retarget_tip_err_mm_p95", "mm"),
        ),
    )
)
add(
    Bench(
        name="dataset",
        command="dataset bench --json",
        quick="dataset bench --json --frames 20 --size 64 --repeats 1",
        what="the dataset writer against plain PyAV encoding",
        headlines=(
            Headline(
                "writer",
                "writer_frames_per_s",
                "frames/s",
                baseline="pyav_frames_per_s",
                baseline_label="plain PyAV, same frames",
                ratio="writer_over_pyav",
            ),
            Headline("writer, raw frames in", "writer_raw_mb_per_s_in", "MB/s"),
            Headline("video", "video"),
        ),
    )
)
add(
    Bench(
        name="policy",
        command="policy bench --json --preset tiny",
        quick="policy bench --json --preset tiny --repeats 2",
        what="ms per action chunk of the tiny preset on this device",
        headlines=(
            Headline(
                "per action chunk",
                "ms_per_chunk",
                "ms",
                baseline="uncached_ms_per_chunk",
                baseline_label="sampling without the observation cache",
            ),
            Headline("observation encoding", "encode_ms", "ms"),
            Headline("Euler steps", "denoise_ms", "ms"),
            Headline("peak memory", "peak_memory_mib", "MiB"),
            Headline("device", "device"),
        ),
    )
)
add(
    Bench(
        name="runtime",
        command="runtime bench --json --seconds 6",
        quick="runtime bench --json --seconds 2",
        what="the 50 Hz loop on the wall-clock twin, RTC against sync execution",
        headlines=(
            Headline(
                "control period, p99",
                "period_p99_ms",
                "ms",
                baseline="peer.period_p99_ms",
                baseline_label=SYNC,
            ),
            Headline(
                "control period, max",
                "period_max_ms",
                "ms",
                baseline="peer.period_max_ms",
                baseline_label=SYNC,
            ),
            Headline("stalls", "stalls", baseline="peer.stalls", baseline_label=SYNC),
            Headline(
                "loop overhead",
                "overhead_ms",
                "ms",
                baseline="peer.overhead_ms",
                baseline_label=SYNC,
            ),
            Headline("inference, p50", "infer_ms_p50", "ms"),
        ),
    )
)
add(
    Bench(
        name="train-bench",
        command="train bench --json --data {data} --image-size 64 --batch-size 16 --workers 0 "
        "--batches 10",
        quick="train bench --json --data {data} --image-size 64 --batch-size 4 --workers 0 "
        "--batches 2",
        what="the policy's data loader, warm and cold cache",
        headlines=(
            Headline(
                "loader, warm cache",
                "samples_per_s",
                "samples/s",
                baseline="plain_samples_per_s",
                baseline_label="decoding on demand",
                ratio="over_plain",
            ),
            Headline(
                "loader, first pass (cache built)",
                "cold_samples_per_s",
                "samples/s",
                baseline="plain_samples_per_s",
                baseline_label="decoding on demand",
            ),
            Headline(
                "loader, warm cache",
                "samples_per_s",
                "samples/s",
                baseline="lerobot_samples_per_s",
                baseline_label="LeRobot's LeRobotDataset (needs make lerobot-venv)",
                ratio="over_lerobot",
            ),
        ),
    )
)
add(
    Bench(
        name="train-speed",
        command="train speed --json --data {data} --steps 40 --rounds 2 --cache-dir {work}/cache",
        quick="train speed --json --data {data} --steps 20 --rounds 1 --cache-dir {work}/cache",
        what="training samples/s of the CPU recipe and the closed-loop check's, in turns",
        headlines=(
            Headline(
                "CPU recipe (two gloo processes)",
                "recipes.1.samples_per_s",
                "samples/s",
                baseline="recipes.0.samples_per_s",
                baseline_label="the closed-loop check's recipe",
                ratio="recipes.1.over_first",
            ),
        ),
    )
)
add(
    Bench(
        name="generate",
        command="generate --json --out {work}/generate --source {data} --episodes 2 "
        "--image-size 64",
        quick="generate --json --out {work}/generate --source {data} --episodes 1 --image-size 0",
        what="adapted generation: attempts per second, the time split, attempt physics",
        headlines=(
            Headline("attempts per core", "attempts_per_s_per_core", "attempts/s"),
            Headline(
                "attempt physics",
                "physics_steps_per_s",
                "steps/s",
                baseline="raw_mj_steps_per_s",
                baseline_label="raw mj_step",
                ratio="physics_vs_raw",
            ),
            Headline("share of time rendering and saving", "time_share.render_and_save"),
            Headline("share of attempts kept", "success_rate"),
        ),
    )
)
add(
    Bench(
        name="ground",
        command="ground bench --json --seed 0",
        quick=None,
        what="the grounded world against the twin's hidden truth (exit 1 on a missed limit)",
        headlines=(
            Headline(
                "TCP error, RMS",
                "tcp_rms_mm",
                "mm",
                baseline="nominal.tcp_rms_mm",
                baseline_label=NOMINAL,
            ),
            Headline(
                "fingertip error, RMS",
                "fingertip_rms_mm",
                "mm",
                baseline="nominal.fingertip_rms_mm",
                baseline_label=NOMINAL,
            ),
            Headline(
                "belt error",
                "belt_err_mm",
                "mm",
                baseline="nominal.belt_err_mm",
                baseline_label=NOMINAL,
            ),
            Headline(
                "bins error",
                "bins_err_mm",
                "mm",
                baseline="nominal.bins_err_mm",
                baseline_label=NOMINAL,
            ),
            Headline(
                "head camera pose error",
                "cameras.head.pose_err_mm",
                "mm",
                baseline="cameras.head.nominal.pose_err_mm",
                baseline_label=NOMINAL,
            ),
            Headline(
                "image difference",
                "image_diff",
                baseline="nominal.image_diff",
                baseline_label=NOMINAL,
            ),
            Headline("limits missed", "failures"),
        ),
    )
)

# Benches ``make bench`` leaves out: name -> (command, why).
LEFT_OUT: dict[str, tuple[str, str]] = {
    "learning": (
        "r2s2r bench learning --out DIR",
        "records 50 demonstrations, trains 10,000 steps and evaluates 50 trials at its "
        "defaults: far longer than the suite",
    ),
    "study": (
        "r2s2r study bench --out DIR",
        "runs the smoke study first (its preset says about 8 min on 2 idle cores)",
    ),
    "studio": ("make studio-bench", "the Studio's views under Qt; not an r2s2r command"),
}
