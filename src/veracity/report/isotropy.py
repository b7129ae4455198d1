"""Report section for isotropy checks: angle distributions and the share within the cone."""

from __future__ import annotations

from typing import Any

from veracity.report.html import esc, figure, fmt, pyplot, table
from veracity.store import RunDir

_SHOWN_ITEMS = 50
_ANGLES = (
    ("answer_angle", "answer vs mean of perturbed answers"),
    ("prompt_angle_mean", "perturbed prompts vs prompt (mean angle)"),
    ("prompt_angle_std", "spread (std) of the perturbed prompts' angles"),
    ("prompt_centroid_angle", "prompt vs mean of perturbed prompts"),
)


def _label(results: dict[str, Any]) -> str:
    return f"{results['model']} × {results['dataset']} ({results['settings']['ball']})"


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


def _summary(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        r = run.results
        agg = r["aggregate"]
        for key, title in _ANGLES:
            s = agg[key]
            rows.append([_label(r), title, s["n"], s["mean"], s["stderr"], s["median"], s["max"],
                         _pct(s["share_within_cone"]), agg["cone"]])
    return table(
        ["run", "angle (degrees)", "questions", "mean", "± s.e.", "median", "max", "% ≤ cone",
         "cone"],
        rows, digits=2,
    ) + ("<p class='muted'>Isotropic ball: the perturbed points scatter evenly around the "
         "original, so the mean of the perturbed prompts lies much closer to the prompt than "
         "each point does. The paper reports angles under 11° (100 TruthfulQA questions, N = 10, "
         "ada-002 embeddings); angles depend on the embedder.</p>")


def _histograms(runs: list[RunDir]) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(len(runs), 2, figsize=(10, 3.2 * len(runs)), squeeze=False)
    for (left, right), run in zip(axes, runs, strict=True):
        r = run.results
        cone = r["aggregate"]["cone"]
        samples = list(run.samples())
        for ax, key, title in ((left, "answer_angle", "answer vs mean perturbed answer"),
                               (right, "prompt_angle_mean", "perturbed prompts vs prompt")):
            values = [s[key] for s in samples if s.get(key) is not None]
            upper = max([cone * 2, *values]) if values else cone * 2
            ax.hist(values, bins=30, range=(0, upper), color="#4c72b0", edgecolor="white")
            ax.axvline(cone, color="#c44e52", linestyle="--", linewidth=1, label=f"cone {cone}°")
            ax.set_title(f"{_label(r)}\n{title}", fontsize=8)
            ax.set_xlabel("degrees", fontsize=8)
            ax.set_ylabel("questions", fontsize=8)
            ax.legend(fontsize=7)
    fig.tight_layout()
    return figure(fig, "isotropy angle histograms")


def _items(run: RunDir) -> str:
    samples = sorted(run.samples(), key=lambda s: -(s.get("answer_angle") or 0.0))
    rows = [
        [s["prompt"], s["answer_angle"], s["prompt_angle_mean"], s["prompt_angle_std"],
         s["prompt_centroid_angle"], s["gamma"], s["answer"]]
        for s in samples[:_SHOWN_ITEMS]
    ]
    return (
        f"<details><summary>{esc(_label(run.results))}: questions, largest answer angle first "
        f"(at most {_SHOWN_ITEMS})</summary>"
        + table(["question", "answer angle", "prompt angle mean", "prompt angle std",
                 "prompt centroid angle", "γ", "answer"], rows, digits=2)
        + "</details>"
    )


def section(runs: list[RunDir]) -> str:
    """HTML for a group of isotropy runs."""
    parts = [_summary(runs), "<h3>Angle distributions</h3>", _histograms(runs),
             "<h3>Questions</h3>"]
    parts.extend(_items(run) for run in runs)
    return "".join(parts) + f"<p class='muted'>{fmt(None)} = undefined (empty answer).</p>"
