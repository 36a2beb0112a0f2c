"""``r2s2r rig``: the twin and the teleoperation path."""

from __future__ import annotations

import json
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="The rig: twin, teleoperation, safety.")


@app.command()
def bench(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    seconds: Annotated[float, typer.Option(help="time per measurement")] = 3.0,
    operator_seeds: Annotated[
        int, typer.Option(help="also run the scripted operator on this many seeds (no cameras)")
    ] = 0,
) -> None:
    """Measure the twin's real-time factor, the retargeting rate and accuracy, and the
    recording real-time factor and dataset write throughput."""
    from r2s2r.data.record_bench import bench_record
    from r2s2r.rig.bench import BEFORE_DETAIL, run_bench
    from r2s2r.rig.twin.views import TwinViewsCfg

    result = run_bench(seconds, operator_seeds)
    result.update(bench_record(seconds))
    # Takes of 1 s start and save an episode every second; a person's takes last 5-15 s.
    long_takes = bench_record(max(seconds, 5.0), take_s=5.0)
    result["record_realtime_factor_5s_takes"] = long_takes["record_realtime_factor"]
    # Frames three periods old (60 ms) instead of two: more slack for the view workers.
    later = bench_record(seconds, views=TwinViewsCfg(latency=3))
    result["record_realtime_factor_latency_3"] = later["record_realtime_factor"]
    # 64 px views, with the scripted operator's motion (which leaves fewer frames still
    # than the twin bench's slow arm), and the same without the steps for small views.
    small = bench_record(seconds, size=64)["record_realtime_factor"]
    result["record_realtime_factor_64px"] = small
    before = bench_record(seconds, views=BEFORE_DETAIL, size=64)["record_realtime_factor"]
    result["record_realtime_factor_64px_before_small_view_steps"] = before
    # Today's reference camera path in the same run, for the ratio.
    reference = bench_record(seconds, views=TwinViewsCfg.reference())["record_realtime_factor"]
    result["record_realtime_factor_reference_views"] = reference
    result["record_vs_reference_views"] = result["record_realtime_factor"] / reference
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        shown = f"{value:,.2f}" if isinstance(value, float) else value
        typer.echo(f"{key:36s} {shown}")
