"""``r2s2r deploy``: run a policy on a rig live (shown, recorded, with faults injected), and
``r2s2r deploy inspect``: read a recorded deployment back."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from r2s2r.cli.choices import ExecutionKind, RigKind

if TYPE_CHECKING:
    from r2s2r.app.live import LiveFrame

app = typer.Typer(
    invoke_without_command=True,
    help="Run a policy on a rig live; `r2s2r deploy inspect DIR` reads a recorded one back.",
)
KEYS_HELP = "space or x: emergency stop; q: stop after this episode"


class Keys:
    """Single keys from the terminal, read by a background thread: space or ``x`` calls
    ``on_estop``, ``q`` calls ``on_quit``."""

    def __init__(self, on_estop: Any, on_quit: Any) -> None:
        self.on_estop, self.on_quit = on_estop, on_quit
        self._saved: Any = None
        if sys.stdin.isatty():
            import termios
            import tty

            self._saved = termios.tcgetattr(sys.stdin.fileno())
            tty.setcbreak(sys.stdin.fileno())
        self._thread = threading.Thread(target=self._read, daemon=True, name="deploy-keys")
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                ch = sys.stdin.read(1)
            except (OSError, ValueError):
                return
            if not ch:
                return
            self.key(ch)

    def key(self, ch: str) -> None:
        if ch in (" ", "x", "X"):
            self.on_estop("emergency stop key")
        elif ch in ("q", "Q"):
            self.on_quit()

    def close(self) -> None:
        if self._saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)
            self._saved = None


def has_display() -> bool:
    """Whether OpenCV can open a window here (a display, and a build with a GUI)."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    import cv2

    try:
        cv2.namedWindow("r2s2r deploy", cv2.WINDOW_NORMAL)
    except cv2.error:
        return False
    return True


class Show:
    """Shows live frames: in an OpenCV window where there is a display, else as a PNG
    refreshed at ``preview`` and a chunk timing line printed per frame."""

    def __init__(self, preview: Path, window: bool, keys: Keys | None) -> None:
        self.preview, self.window, self.keys = preview, window, keys
        if not window:
            preview.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, frame: LiveFrame) -> None:
        from r2s2r.app.live import compose, timing_line, write_png

        image = compose(frame)
        if self.window:
            import cv2

            cv2.imshow("r2s2r deploy", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
            key = cv2.waitKey(1)
            if key >= 0 and self.keys is not None:
                self.keys.key(chr(key & 0xFF))
            return
        write_png(image, str(self.preview))
        typer.echo(timing_line(frame))


def _episode_line(ep: Any) -> str:
    s = ep.summary
    t = s["timing"]

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    saved = "" if ep.dataset_episode is None else f", saved as episode {ep.dataset_episode}"
    return (
        f"episode {ep.index}: {s['object']} {s['outcome']} (ended by {s['ended_by']}), "
        f"{t['steps']} steps; chunks {t['chunks']} ({t['rejected_chunks']} rejected), "
        f"inference p50 {ms(t['infer_ms_p50'])} ms; period p50 {ms(t['period_p50_ms'])} / "
        f"p99 {ms(t['period_p99_ms'])} / max {ms(t['period_max_ms'])} ms, held "
        f"{t['stalls']}; safety events {len(s['safety_events'])}{saved}"
    )


@app.callback()
def deploy(
    ctx: typer.Context,
    rig: Annotated[RigKind, typer.Option("--rig", help="the twin or the real cell")] = RigKind.twin,
    config: Annotated[
        Path | None, typer.Option("--config", help="hardware rig YAML (with --rig hardware)")
    ] = None,
    policy: Annotated[
        str | None, typer.Option("--policy", help="a training run folder, or 'scripted'")
    ] = None,
    server: Annotated[
        str | None, typer.Option("--server", help="HOST:PORT of a policy server (r2s2r serve)")
    ] = None,
    token: Annotated[
        str | None, typer.Option("--token", envvar="R2S2R_SERVE_TOKEN", help="server token")
    ] = None,
    realtime: Annotated[
        bool, typer.Option("--realtime", help="pace the twin to the wall clock")
    ] = False,
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="episodes to run")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="twin and scripted operator seed")] = 0,
    condition: Annotated[str, typer.Option("--condition", help="twin condition")] = "nominal",
    execution: Annotated[
        ExecutionKind, typer.Option("--execution", help="how chunks are joined")
    ] = ExecutionKind.rtc,
    exec_horizon: Annotated[
        int, typer.Option("--exec-horizon", min=1, help="actions run per inference")
    ] = 10,
    lockstep_delay: Annotated[
        str,
        typer.Option(
            "--lockstep-delay",
            help="lockstep twin: periods a chunk arrives after its observation, or "
            "'measured' (its inference's latency)",
        ),
    ] = "3",
    record: Annotated[
        Path | None, typer.Option("--record", help="dataset folder to record into")
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option("--fault", help="inject a fault (twin), e.g. latency:300ms@2s, nan@1.5s"),
    ] = None,
    show: Annotated[bool, typer.Option("--show", help="show the views and chunk timing")] = False,
    preview: Annotated[
        Path, typer.Option("--preview", help="PNG refreshed by --show without a display")
    ] = Path("outputs/deploy_live.png"),
    image_size: Annotated[int, typer.Option("--image-size", help="twin camera views, px")] = 128,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", help="episode length limit")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="torch device of a learned policy")] = (
        "auto"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="print the episodes as JSON")] = False,
) -> None:
    """Run episodes of a policy on a rig at 50 Hz, every command through the safety
    supervisor; keys: space or x is an emergency stop, q stops after the episode."""
    if ctx.invoked_subcommand is not None:
        return
    from r2s2r.app.deploy import DeployRequest, EmergencyStop, check_request
    from r2s2r.app.deploy import deploy as run_deploy
    from r2s2r.app.jobs import Cancel, RequestError
    from r2s2r.cli.progress import progress_bar

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if lockstep_delay != "measured" and not lockstep_delay.isdigit():
        typer.echo(
            f"error: --lockstep-delay {lockstep_delay!r}: expected N or 'measured'", err=True
        )
        raise typer.Exit(2)
    request = DeployRequest(
        rig=rig.value,
        config=config,
        policy=policy,
        server=server,
        token=token,
        realtime=realtime,
        episodes=episodes,
        seed=seed,
        condition=condition,
        execution=execution.value,
        exec_horizon=exec_horizon,
        delay_periods=None if lockstep_delay == "measured" else int(lockstep_delay),
        record=record,
        faults=tuple(fault or ()),
        image_size=image_size,
        max_seconds=max_seconds,
        device=device,
    )
    estop, cancel = EmergencyStop(), Cancel()
    keys: Keys | None = None
    try:
        check_request(request)
        keys = Keys(estop.trigger, cancel.cancel)
        typer.echo(f"keys: {KEYS_HELP}", err=True)
        on_frame = Show(preview, has_display(), keys) if show else None
        with progress_bar(episodes, "deploy", "ep", disable=as_json or show) as progress:
            result = run_deploy(request, progress, cancel, on_frame, estop)
    except RequestError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    finally:
        if keys is not None:
            keys.close()
    if as_json:
        typer.echo(json.dumps([{"episode": e.index, **e.summary} for e in result.episodes]))
    else:
        for ep in result.episodes:
            typer.echo(_episode_line(ep))
        if show and not has_display():
            typer.echo(f"live view: {preview}")
    if record is not None:
        typer.echo(f"recorded into {record} (r2s2r deploy inspect {record})")
    if result.estopped:
        typer.echo("emergency stop: the session ended", err=True)
        raise typer.Exit(3)


@app.command()
def inspect(
    root: Annotated[Path, typer.Argument(help="a dataset folder written by deploy --record")],
    episode: Annotated[int | None, typer.Option("--episode", help="one episode")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Print the chunk timing and safety events of a recorded deployment."""
    from r2s2r.app.deployments import describe, inspect_deployment

    report = inspect_deployment(root, episode)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=1))
        return
    for line in describe(report, chunks=episode is not None):
        typer.echo(line)
