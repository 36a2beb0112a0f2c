"""``r2s2r report``: the evaluation report of one or more evaluation directories;
``r2s2r compare``: whether two policies' difference in success is settled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


def report(
    dirs: Annotated[list[Path], typer.Argument(help="evaluation directories (r2s2r eval --out)")],
    out: Annotated[Path, typer.Option("--out", help="folder for report.html and report.json")],
    resamples: Annotated[
        int, typer.Option("--resamples", min=100, help="bootstrap resamples of the effects")
    ] = 10_000,
    seed: Annotated[int, typer.Option("--seed", help="bootstrap seed")] = 0,
    max_clips: Annotated[
        int, typer.Option("--max-clips", min=0, help="rollout clips embedded at most")
    ] = 4,
    as_json: JsonOpt = False,
) -> None:
    """Write OUT/report.html (success table, bar chart, grounding effects, comparisons, latent
    plots, clips) and OUT/report.json (every number, with the trials it counts)."""
    from r2s2r.eval.report import write_report

    result = write_report(dirs, out, resamples=resamples, seed=seed, max_clips=max_clips)
    if as_json:
        typer.echo(json.dumps(result.data, indent=2))
        return
    typer.echo(result.text_table())
    for note in result.data["effect_notes"]:
        typer.echo(f"note: {note}")
    typer.echo(f"report: {result.html}\nnumbers: {result.json}")


def compare(
    dir_a: Annotated[Path, typer.Argument(help="evaluation directory of policy A")],
    dir_b: Annotated[Path, typer.Argument(help="evaluation directory of policy B")],
    alpha: Annotated[
        float, typer.Option("--alpha", min=0.0, max=1.0, help="error rate of the test")
    ] = 0.05,
    effect: Annotated[
        float, typer.Option("--effect", min=0.0, max=1.0, help="difference to detect (0.15: 15 pp)")
    ] = 0.15,
    power: Annotated[
        float, typer.Option("--power", min=0.0, max=1.0, help="power to detect it")
    ] = 0.8,
    group: Annotated[
        str, typer.Option("--group", help="condition, shifted or overall")
    ] = "overall",
    as_json: JsonOpt = False,
) -> None:
    """Say whether A's and B's success differ beyond sampling error, and how many more trials
    per policy would settle a difference of the observed size and of --effect."""
    from r2s2r.eval.compare import compare as compare_logs
    from r2s2r.eval.stats import group_conditions
    from r2s2r.eval.trials import check_comparable, read_trials

    group_conditions(group)
    logs = [read_trials(dir_a), read_trials(dir_b)]
    check_comparable(logs)
    result = compare_logs(logs[0], logs[1], group, alpha=alpha, effect=effect, power=power)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    typer.echo(result.verdict)
