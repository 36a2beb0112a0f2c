"""The evaluation report: one self-contained HTML page (``OUT/report.html``: CSS inline,
figures and a few clips embedded) and ``OUT/report.json`` with every number on the page.

Each number in report.json carries the trial indices it counts and the trials.jsonl it came
from, so that it can be checked against the logs by hand.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from r2s2r import __version__
from r2s2r.eval import plots
from r2s2r.eval.compare import compare
from r2s2r.eval.funnel import STAGES, funnel_counts
from r2s2r.eval.media import Latent, candidate_clips, choose_clips, data_uri, read_latent
from r2s2r.eval.stats import (
    DEFAULT_RESAMPLES,
    GROUP_TITLES,
    GROUPS,
    cell,
    grounding_effects,
    policy_labels,
    success_table,
)
from r2s2r.eval.trials import TrialLog, TrialLogError, check_comparable, read_trials

# The groups the pairwise comparisons are made in.
COMPARISON_GROUPS = ("overall", "shifted")
MB = 1 << 20
CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:center}
th{background:#f2f2f2} td.l,th.l{text-align:left} .ci{color:#666;font-size:0.85em}
.note{color:#555;font-size:0.9em} img{max-width:100%} video{max-width:48%;margin:4px}
"""


@dataclass(frozen=True)
class Report:
    """A written report: its two files and the data of report.json."""

    html: Path
    json: Path
    data: dict[str, Any]

    def text_table(self) -> str:
        return format_table(self.data) + "\n\n" + format_funnel(self.data)


def format_table(data: dict[str, Any]) -> str:
    """Table 2 as plain text: successes/trials and rate per policy and group."""
    width = max([6, *(len(p["label"]) for p in data["policies"])])
    lines = [f"{'policy':{width}s}" + "".join(f" {GROUP_TITLES[g]:>14s}" for g in GROUPS)]
    for p in data["policies"]:
        row = f"{p['label']:{width}s}"
        for g in GROUPS:
            c = p["table"][g]
            text = f"{c['successes']}/{c['trials']}"
            text += f" {100 * c['rate']:3.0f}%" if c["rate"] is not None else "    -"
            row += f" {text:>14s}"
        lines.append(row)
    return "\n".join(lines)


def policy_progress(log: TrialLog) -> dict[str, Any]:
    """A policy's funnel (trials past each stage; None where a trial has none), its chunks
    and how many the runtime rejected, and the trials in which it did not act (every chunk
    rejected)."""
    records = log.records
    counted = [r for r in records if r.chunks is not None]
    return {
        "instances": log.info.instances,
        "funnel": funnel_counts(r.stage for r in records),
        "chunks": sum(r.chunks or 0 for r in counted) if counted else None,
        "rejected_chunks": sum(r.rejected_chunks or 0 for r in counted) if counted else None,
        "did_not_act": [r.trial for r in records if r.did_not_act],
    }


def _funnel_row(p: dict[str, Any]) -> tuple[str, list[str], str]:
    """A policy's funnel row: its label (with the instances its trials met), the cells
    (trials, each stage, rejected/chunks) and whether it acted."""
    funnel, chunks = p.get("funnel"), p.get("chunks")
    cells = [str(p["trials_logged"])]
    cells += [str(funnel[s]) if funnel else "-" for s in STAGES]
    cells.append(f"{p['rejected_chunks']}/{chunks}" if chunks else "-")
    flag = ""
    if p.get("did_not_act"):
        n, total = len(p["did_not_act"]), p["trials_logged"]
        flag = "did not act" if n == total else f"did not act in {n} of {total} trials"
    kind = p.get("instances")
    return p["label"] + ("" if kind is None else f" ({kind} instances)"), cells, flag


def format_funnel(data: dict[str, Any]) -> str:
    """The funnel as plain text: per policy, trials past each stage and rejected chunks."""
    rows = [_funnel_row(p) for p in data["policies"]]
    width = max([6, *(len(label) for label, _, _ in rows)])
    names = ("trials", *STAGES, "rejected")
    lines = [f"{'policy':{width}s}" + "".join(f" {n:>9s}" for n in names)]
    for label, cells, flag in rows:
        lines.append(f"{label:{width}s}" + "".join(f" {c:>9s}" for c in cells) + f"  {flag}")
    return "\n".join(line.rstrip() for line in lines)


def _funnel_html(data: dict[str, Any]) -> str:
    head = "".join(f"<th>{escape(s.replace('_', ' '))}</th>" for s in STAGES)
    rows = []
    for label, cells, flag in (_funnel_row(p) for p in data["policies"]):
        tds = "".join(f"<td>{c}</td>" for c in cells)
        rows.append(
            f"<tr><td class=l>{escape(label)}</td>{tds}<td class=l>{escape(flag)}</td></tr>"
        )
    return (
        f"<table><tr><th class=l>policy</th><th>trials</th>{head}<th>chunks rejected</th>"
        f"<th class=l></th></tr>{''.join(rows)}</table>"
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def build_data(
    logs: Sequence[TrialLog],
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
    effect: float = 0.15,
    power: float = 0.8,
) -> dict[str, Any]:
    """Every number of the report, each with the trials it counts and their log."""
    labels = policy_labels(logs)
    by_label = dict(zip(labels, logs, strict=True))
    policies = []
    for label, log in zip(labels, logs, strict=True):
        table = success_table(log.records, confidence)
        policies.append(
            {
                "label": label,
                "dir": str(log.dir),
                "trials_path": str(log.path),
                "policy": log.info.to_json()["policy"],
                "trials_planned": log.info.trials_planned,
                "trials_logged": len(log.records),
                "table": {
                    g: {**c.to_json(), "trials_path": str(log.path)} for g, c in table.items()
                },
                **policy_progress(log),
            }
        )
    effects, notes = grounding_effects(
        logs, labels, confidence=confidence, resamples=resamples, seed=seed
    )
    effect_rows = []
    for e in effects:
        row = e.to_json()
        positive = [lb for lb, w in e.weights.items() if w > 0]
        row["short"] = f"gain {positive[0]}" if e.kind == "gain" else e.kind
        row["trials"] = {
            lb: {
                "trials_path": str(by_label[lb].path),
                "trial_indices": list(cell(by_label[lb].records, e.group).trial_indices),
            }
            for lb in e.weights
        }
        effect_rows.append(row)
    comparisons = []
    pairs = itertools.combinations(zip(labels, logs, strict=True), 2)
    for (la, a), (lb, b) in pairs:
        for group in COMPARISON_GROUPS:
            if cell(a.records, group).trials and cell(b.records, group).trials:
                c = compare(a, b, group, alpha=alpha, effect=effect, power=power, labels=(la, lb))
                comparisons.append(c.to_json())
    info = logs[0].info
    return {
        "version": __version__,
        "protocol": info.protocol,
        "protocol_seed": info.protocol_seed,
        "rig": info.rig,
        "confidence": confidence,
        "groups": list(GROUPS),
        "policies": policies,
        "bootstrap": {
            "resamples": resamples,
            "seed": seed,
            "method": "percentile; trials resampled within each policy and condition",
        },
        "effects": effect_rows,
        "effect_notes": notes,
        "comparison_settings": {"alpha": alpha, "effect": effect, "power": power},
        "comparisons": comparisons,
    }


def _table_html(data: dict[str, Any]) -> str:
    head = "".join(f"<th>{escape(GROUP_TITLES[g])}</th>" for g in GROUPS)
    rows = []
    for p in data["policies"]:
        cells = []
        for g in GROUPS:
            c = p["table"][g]
            if c["rate"] is None:
                cells.append("<td>0/0</td>")
                continue
            cells.append(
                f"<td>{c['successes']}/{c['trials']} ({_pct(c['rate'])})<br>"
                f"<span class=ci>[{_pct(c['wilson_low'])}, {_pct(c['wilson_high'])}]</span></td>"
            )
        rows.append(f"<tr><td class=l>{escape(p['label'])}</td>{''.join(cells)}</tr>")
    return f"<table><tr><th class=l>policy</th>{head}</tr>{''.join(rows)}</table>"


def _effects_html(data: dict[str, Any]) -> str:
    if not data["effects"]:
        return ""
    conf = f"{100 * data['confidence']:.0f}%"
    rows = "".join(
        f"<tr><td class=l>{escape(e['title'])}</td><td>{escape(e['group'])}</td>"
        f"<td>{_pp(e['estimate'])}</td><td>[{_pp(e['low'])}, {_pp(e['high'])}]</td></tr>"
        for e in data["effects"]
    )
    return (
        f"<table><tr><th class=l>effect</th><th>group</th><th>estimate (pp)</th>"
        f"<th>{conf} bootstrap interval (pp)</th></tr>{rows}</table>"
    )


def _sprt_text(c: dict[str, Any]) -> str:
    decision = c["sprt"]["decision"]
    if decision in ("a_better", "b_better"):
        return f"{c[decision[0]]} better"
    return "no difference" if decision == "no_difference" else "continue"


def _comparisons_html(data: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td class=l>{escape(c['a'])} vs {escape(c['b'])}</td><td>{escape(c['group'])}</td>"
        f"<td>{_pp(c['difference'])} [{_pp(c['low'])}, {_pp(c['high'])}]</td>"
        f"<td>{c['p_value']:.3g} ({'Fisher' if c['test'] == 'fisher_exact' else 'z'})</td>"
        f"<td>{'yes' if c['settled'] else 'no'}</td><td>{escape(_sprt_text(c))}</td>"
        f"<td class=l>{escape(c['verdict'])}</td></tr>"
        for c in data["comparisons"]
    )
    s = data["comparison_settings"]
    return (
        f"<p class=note>alpha = {s['alpha']:g}; power analysis and SPRT for a "
        f"{100 * s['effect']:.0f} pp difference at {100 * s['power']:.0f}% power. "
        "The fixed-sample test holds for one look at the trials; the SPRT may be looked at "
        "after every trial.</p><table><tr><th class=l>pair</th><th>group</th>"
        "<th>difference (pp) [Newcombe]</th><th>p</th><th>settled</th><th>SPRT</th>"
        f"<th class=l>verdict</th></tr>{rows}</table>"
    )


def _latent_html(label: str, latent: Latent) -> str:
    parts = [f"<h3>{escape(label)}</h3>"]
    if latent.numbers is not None:
        rows = "".join(
            f"<tr><td class=l>{escape(k)}</td><td>{escape(_scalar(v))}</td></tr>"
            for k, v in latent.numbers
        )
        parts.append(f"<table><tr><th class=l>latent.json</th><th>value</th></tr>{rows}</table>")
        if latent.truncated:
            parts.append("<p class=note>(more numbers in latent.json)</p>")
    for name, png in latent.plots:
        parts.append(f"<p><img alt='{escape(name)}' src='{data_uri(png, 'image/png')}'></p>")
    return "".join(parts)


def _scalar(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return json.dumps(v) if not isinstance(v, str) else v


def _write_atomic(path: Path, text: str) -> None:
    # A crash mid-write leaves the previous report in place, not half a new one.
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_report(
    dirs: Sequence[Path],
    out: Path,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
    effect: float = 0.15,
    power: float = 0.8,
    max_clips: int = 4,
    max_clip_mb: float = 4.0,
    max_clips_mb: float = 12.0,
    notes: Sequence[str] = (),
) -> Report:
    """Read the evaluation directories, check that they ran the same protocol, and write
    ``out/report.html`` and ``out/report.json``; ``notes`` (how the policies were made, from
    a study) go at the top of both."""
    if not dirs:
        raise TrialLogError("a report needs at least one evaluation directory")
    logs = [read_trials(Path(d)) for d in dirs]
    check_comparable(logs)
    for log in logs:
        if not log.records:
            raise TrialLogError(f"{log.path}: no finished trials to report")
    data = build_data(logs, confidence, resamples, seed, alpha, effect, power)
    data["notes"] = list(notes)
    labels = [p["label"] for p in data["policies"]]
    latents = [(lb, read_latent(log.dir)) for lb, log in zip(labels, logs, strict=True)]
    data["latent"] = [{"policy": lb, **lt.to_json()} for lb, lt in latents if lt is not None]
    clips = choose_clips(
        [candidate_clips(log, lb) for lb, log in zip(labels, logs, strict=True)],
        max_clips,
        int(max_clip_mb * MB),
        int(max_clips_mb * MB),
    )
    data["clips"] = clips.to_json()
    bars = plots.success_bars(labels, GROUPS, GROUP_TITLES, [p["table"] for p in data["policies"]])
    parts = [
        f"<h1>Evaluation report</h1><p class=note>protocol {escape(data['protocol'])}, "
        f"seed {data['protocol_seed']}, rig {escape(data['rig'])}; r2s2r {__version__}. "
        "Every number is in report.json with the trial indices it counts.</p>",
        *(f"<p class=note>{escape(n)}</p>" for n in notes),
        "<h2>Success per policy and condition (Table 2)</h2>",
        f"<p class=note>successes/trials (rate) and Wilson {100 * confidence:.0f}% interval; "
        "shifted total = every non-nominal trial.</p>",
        _table_html(data),
        f"<p><img alt='success per condition' src='{data_uri(bars, 'image/png')}'></p>",
        "<h2>How far the trials got</h2>",
        "<p class=note>trials past each stage, judged from the twin's truth every period "
        "(a hand within 6 cm of the object; two hand parts touching it; lifted 3 cm while "
        "held; over its bin; sorted), and the chunks the runtime's checks rejected. A policy "
        "whose chunks were all rejected did not act: its zeros say nothing of what it "
        "learned.</p>",
        _funnel_html(data),
        "<h2>Grounding effects</h2>",
        f"<p class=note>percentile bootstrap, {resamples} resamples (seed {seed}), trials "
        "resampled within each policy and condition; pp = percentage points.</p>",
        _effects_html(data),
    ]
    if data["effects"]:
        forest = plots.effect_forest(data["effects"])
        parts.append(f"<p><img alt='effects' src='{data_uri(forest, 'image/png')}'></p>")
    parts += [f"<p class=note>{escape(n)}</p>" for n in data["effect_notes"]]
    if data["comparisons"]:
        parts += ["<h2>Pairwise comparisons</h2>", _comparisons_html(data)]
    if data["latent"]:
        parts.append("<h2>Latent-space analysis</h2>")
        parts += [_latent_html(lb, lt) for lb, lt in latents if lt is not None]
    if clips.embedded or clips.skipped:
        parts.append("<h2>Rollout clips</h2>")
        for c in clips.embedded:
            caption = escape(
                f"{c.label}: trial {c.trial}, {c.condition}, {c.outcome}"
                if c.trial is not None
                else f"{c.label}: {c.path.name}"
            )
            parts.append(
                f"<figure style='display:inline-block'><video controls muted "
                f"src='{data_uri(c.path.read_bytes(), 'video/mp4')}'></video>"
                f"<figcaption class=note>{caption}</figcaption></figure>"
            )
        parts.append(
            f"<p class=note>{len(clips.embedded)} clip(s) embedded "
            f"({clips.total_bytes / MB:.1f} MB; the page embeds at most {max_clips} clips, "
            f"{max_clip_mb:g} MB each, {max_clips_mb:g} MB in all); {len(clips.skipped)} other "
            "video(s) not embedded (listed in report.json).</p>"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Evaluation report</title>"
        f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n"
    )
    html_path, json_path = out / "report.html", out / "report.json"
    _write_atomic(html_path, page)
    _write_atomic(json_path, json.dumps(data, indent=2) + "\n")
    return Report(html_path, json_path, data)
