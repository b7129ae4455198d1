"""Report section for adversarial gamma searches: trajectory plot and the steps side by side."""

from __future__ import annotations

from typing import Any

from veracity.methods.gamma.attack.core import visible
from veracity.report.html import esc, figure, fmt, pyplot, table
from veracity.store import RunDir


def _text(text: str) -> str:
    return esc(visible(text, keep="\n\t"))


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _label(run: RunDir) -> str:
    r = run.results
    prompt = r["start"]["prompt"]
    short = prompt if len(prompt) <= 40 else prompt[:39] + "…"
    return f"{short} ({r['model']}, {r['settings']['direction']})"


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = run.results
        s = r["settings"]
        rows.append([
            r["start"]["prompt"], r["model"], r["embedder"], s["direction"], r["steps_taken"],
            r["stop_reason"], r["start"]["gamma"], r["final"]["gamma"], r["best"]["gamma"],
            r["best"]["step"], r["requested_calls"], s["charset"], s["ball"], s["n"], s["form"],
        ])
    return table(
        ["start prompt", "model", "embedder", "direction", "steps", "stopped by", "start γ",
         "final γ", "best γ", "best step", "generations", "candidates from", "γ ball", "N",
         "γ form"],
        rows,
    )


def _plot(runs: list[RunDir]) -> str:
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    for index, run in enumerate(runs):
        colour = f"C{index % 10}"
        steps = list(run.samples())
        xs = [s["step"] for s in steps]
        for s in steps:
            others = [c["gamma"] for c in s["candidates"] if c["gamma"] is not None]
            top.scatter([s["step"]] * len(others), others, s=8, color=colour, alpha=0.25)
        top.plot(xs, [_nan(s["gamma"]) for s in steps], marker="o", color=colour, label=_label(run))
        bottom.plot(xs, [_nan(s.get("similarity_to_start")) for s in steps], marker=".",
                    color=colour)
    top.set_title("Adversarial search: γ per step", fontsize=9)
    top.set_ylabel("γ of the chosen prompt\n(dots: all candidates)", fontsize=8)
    top.legend(fontsize=7)
    bottom.set_ylabel("answer cosine\nto the start answer", fontsize=8)
    bottom.set_xlabel("step")
    fig.tight_layout()
    return figure(fig, "gamma trajectory")


def _prompt_cell(step: dict[str, Any]) -> str:
    suffix = step.get("suffix")
    if suffix is None:
        return f"<code>{esc(visible(step['prompt']))}</code>"
    start = step["prompt"][: len(step["prompt"]) - len(suffix)]
    tail = f"<mark>{esc(visible(suffix))}</mark>" if suffix else ""
    return f"<code>{esc(visible(start))}{tail}</code>"


def _candidates(step: dict[str, Any]) -> str:
    if not step["candidates"]:
        return ""
    items = "".join(
        f"<li>{'<b>' if i == step['chosen'] else ''}γ {fmt(c['gamma'])}: "
        f"<code>…{esc(visible(c['prompt'][-12:]))}</code> → {_text(c['answer'])}"
        f"{'</b>' if i == step['chosen'] else ''}</li>"
        for i, c in enumerate(step["candidates"])
    )
    count = len(step["candidates"])
    return f"<details><summary>{count} candidates</summary><ol start='0'>{items}</ol></details>"


def _steps(run: RunDir) -> str:
    rows = []
    for step in run.samples():
        rows.append(
            f"<tr><td class='num'>{step['step']}</td><td class='num'>{fmt(step['gamma'])}</td>"
            f"<td class='num'>{fmt(step.get('similarity_to_start'))}</td>"
            f"<td>{_prompt_cell(step)}{_candidates(step)}</td><td>{_text(step['answer'])}</td></tr>"
        )
    return (
        f"<details open><summary>{esc(_label(run))}: every step</summary><table><thead><tr>"
        "<th>step</th><th>γ</th><th>cos to start answer</th><th>prompt (appended part marked)</th>"
        f"<th>answer</th></tr></thead><tbody>{''.join(rows)}</tbody></table></details>"
    )


def section(runs: list[RunDir]) -> str:
    """HTML for a group of attack runs."""
    parts = [
        _summary(runs),
        "<p class='muted'>Each step moves to the candidate with the largest γ (smallest when "
        "descending), even when that is lower than the current γ, as the authors' walker does. "
        "Invisible characters are shown as \\xNN / \\uNNNN.</p>",
        "<h3>γ trajectory</h3>", _plot(runs), "<h3>Steps</h3>",
    ]
    parts.extend(_steps(run) for run in runs)
    return "".join(parts)
