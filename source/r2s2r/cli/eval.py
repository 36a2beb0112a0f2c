"""``r2s2r eval``: a policy's trials under an evaluation protocol, logged as they end."""

from __future__ import annotations

import json
import logging
import queue
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from r2s2r.cli.choices import CellOpt, ExecutionKind, RayOpt, RigKind


def evaluate(
    out: Annotated[Path, typer.Option("--out", help="evaluation folder (created or continued)")],
    policy: Annotated[
        str | None, typer.Option("--policy", help="a training run folder, scripted or planned")
    ] = None,
    server: Annotated[
        str | None, typer.Option("--server", help="a policy server, HOST:PORT")
    ] = None,
    token: Annotated[str | None, typer.Option("--token", help="the server's token")] = None,
    rig: Annotated[RigKind, typer.Option("--rig", help="the twin or the real cell")] = RigKind.twin,
    config: Annotated[
        Path | None, typer.Option("--config", help="hardware rig YAML (with --rig hardware)")
    ] = None,
    protocol: Annotated[
        str, typer.Option("--protocol", help="paper, smoke, or a protocol YAML")
    ] = "paper",
    trials: Annotated[
        int | None,
        typer.Option("--trials", min=1, help="run the first N trials of the protocol's list"),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="the protocol seed")] = 0,
    cell: CellOpt = None,
    instances: Annotated[
        str | None,
        typer.Option(
            "--instances",
            help="a training run's own training instances ('train') or the protocol's trials "
            "with none of them ('unseen'); said in eval.json",
        ),
    ] = None,
    noise_seed: Annotated[
        int | None,
        typer.Option(
            "--noise-seed",
            min=0,
            help="a learned policy's flow noise: each trial its own draw from this seed "
            "(default: one fixed draw for every trial)",
        ),
    ] = None,
    execution: Annotated[
        ExecutionKind, typer.Option("--execution", help="how chunks are joined")
    ] = ExecutionKind.rtc,
    exec_horizon: Annotated[
        int, typer.Option("--exec-horizon", min=1, help="actions run per inference")
    ] = 10,
    delay_periods: Annotated[
        str,
        typer.Option(
            "--delay-periods",
            help="twin: a chunk arrives D periods after its observation, or 'measured'",
        ),
    ] = "3",
    video: Annotated[
        str, typer.Option("--video", help="record all trials, none, or every N-th (N)")
    ] = "all",
    image_size: Annotated[int, typer.Option("--image-size", help="twin views, px")] = 256,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", help="trial length limit (default: task's)")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:N")] = "auto",
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="twin trials run at once, in processes")
    ] = 1,
    ray: RayOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Run a policy's trials under an evaluation protocol (paper: 50 trials, 24 nominal and
    26 shifted) on the twin or the real cell, and log each as it ends (OUT/trials.jsonl; the
    recorded trials in OUT/rollouts). Rerun the same command to continue after a stop;
    Ctrl-C stops after dropping the trial in progress.

    On the twin each trial is judged from the twin's truth; on the real cell the operator
    sets each trial up when asked and judges it by key: s sorted, w wrong bin, d dropped,
    f failed.
    """
    from r2s2r.app.evaluate import EvalRequest
    from r2s2r.app.evaluate import evaluate as run_eval
    from r2s2r.app.jobs import Cancel, RequestError
    from r2s2r.cli.progress import progress_bar
    from r2s2r.rig.kinds import RIGS

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    delay = None if delay_periods == "measured" else _periods(delay_periods)
    runtime = {
        "execution": execution.value,
        "exec_horizon": exec_horizon,
        "delay_periods": delay,
        "max_s": max_seconds,
    }
    options = {
        "out": out,
        "policy": policy,
        "server": server,
        "token": token,
        "rig": rig.value,
        "config": config,
        "protocol": protocol,
        "trials": trials,
        "seed": seed,
        "cell": cell,
        "instances": instances,
        "noise_seed": noise_seed,
        "runtime": runtime,
        "video": video,
        "image_size": image_size,
        "device": device,
        "workers": workers,
        "ray": ray,
    }
    request = EvalRequest.from_dict(options, source="r2s2r eval")
    cancel = Cancel()
    # Where a person judges each trial, they do it by key.
    keys = LineKeys() if RIGS.get(request.rig).operator else None
    previous = signal.signal(signal.SIGINT, _stop_on_first(cancel))
    try:
        total = trials or _protocol_total(protocol)
        with progress_bar(total, "eval", "trial", disable=as_json) as progress:
            if keys is not None:
                result = run_eval(request, progress, cancel, keys, keys.prompt)
            else:
                result = run_eval(request, progress, cancel)
    except RequestError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    finally:
        signal.signal(signal.SIGINT, previous)
    if as_json:
        typer.echo(json.dumps(result.summary(), indent=2))
        return
    summary = result.summary()
    for group, row in summary["table"].items():
        if row["trials"]:
            typer.echo(
                f"{group:>14}: {row['successes']}/{row['trials']} "
                f"({row['rate']:.0%}, 95% CI {row['wilson_low']:.0%}-{row['wilson_high']:.0%})"
            )
    state = "finished" if result.finished else "stopped; rerun to continue"
    typer.echo(f"{out}: {summary['trials_done']} of {summary['trials_planned']} trials ({state})")


def _periods(text: str) -> int:
    if not text.isdigit():
        raise typer.BadParameter(
            f"expected a number of periods >= 0 or 'measured', got {text!r}",
            param_hint="--delay-periods",
        )
    return int(text)


def _protocol_total(name: str) -> int:
    from r2s2r.eval.protocol import load_protocol

    return load_protocol(name).total


def _stop_on_first(cancel: Any) -> Any:
    """A SIGINT handler: the first Ctrl-C cancels (the trial in progress is dropped, the
    logged ones kept); a second one interrupts at once."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if cancel.cancelled:
            raise KeyboardInterrupt
        typer.echo("\nstopping: the trial in progress is dropped (Ctrl-C again to quit now)")
        cancel.cancel()

    return handler


class LineKeys:
    """The operator's terminal on the real cell, read line by line by a background thread:
    a line typed while a trial runs is a key (its first letter: s, w, d, f, t); a line typed
    after a question (``prompt``) is its answer."""

    def __init__(self) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True, name="eval-keys")
        self._thread.start()

    def _read(self) -> None:
        for line in sys.stdin:
            self._lines.put(line.strip())

    def _drain(self) -> None:
        while True:
            try:
                self._lines.get_nowait()
            except queue.Empty:
                return

    def poll(self) -> str | None:
        """The key of the next line typed, or None."""
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return None
            if line:
                return line[0].lower()

    def prompt(self, question: str) -> str:
        """Ask ``question`` and wait for the answer (lines typed before it are dropped)."""
        self._drain()
        typer.echo(question, nl=False, err=True)
        return self._lines.get()
