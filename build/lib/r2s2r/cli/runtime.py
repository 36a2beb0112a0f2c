"""``r2s2r runtime``: figures of the 50 Hz loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from r2s2r.cli.choices import ExecutionKind

app = typer.Typer(no_args_is_help=True, help="The 50 Hz runtime: its figures.")


@app.command()
def bench(
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="a training run folder (default: a slow replay policy)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    seconds: Annotated[float, typer.Option("--seconds", min=1.0, help="seconds per run")] = 6.0,
    execution: Annotated[
        ExecutionKind, typer.Option("--execution", help="how the runtime joins chunks")
    ] = ExecutionKind.rtc,
    latency_ms: Annotated[
        float, typer.Option("--latency-ms", min=0.0, help="the built-in policy's latency")
    ] = 60.0,
    seed: Annotated[int, typer.Option("--seed", help="twin seed")] = 0,
    device: Annotated[str, typer.Option("--device", help="torch device of --policy")] = "auto",
) -> None:
    """Control-period jitter, inference latency, loop overhead and stalls on the wall-clock
    twin, against the 20 ms budget, beside the same policy in synchronous execution."""
    from r2s2r.runtime.bench import run_bench

    result = run_bench(policy, seconds, execution.value, latency_ms, seed, device)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    peer = result.pop("peer")
    ratio = result.pop("peer_ratio")
    typer.echo(f"policy: {result.pop('policy')}")
    typer.echo(f"{'':26s} {result['execution']:>10s} {'sync peer':>10s}")
    for key, value in result.items():
        if key in ("execution", "policy") or key not in peer:
            shown = f"{value:,.3f}" if isinstance(value, float) else str(value)
            if key != "execution":
                typer.echo(f"{key:26s} {shown:>10s}")
            continue

        def fmt(v: object) -> str:
            return f"{v:,.2f}" if isinstance(v, float) else str(v)

        typer.echo(f"{key:26s} {fmt(value):>10s} {fmt(peer[key]):>10s}")
    typer.echo(
        f"sync / {result['execution']}: period p99 x{ratio['period_p99'] or 0:.2f}, max "
        f"x{ratio['period_max'] or 0:.2f}; stalls {ratio['stalls'][0]} vs {ratio['stalls'][1]}"
    )
