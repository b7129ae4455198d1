"""Report section for isotropy checks: angle distributions and the share within the cone."""

from __future__ import annotations

from typing import Any

from veracity.methods.gamma.isotropy.core import IsotropyAggregate
from veracity.report.html import figure, fmt, pyplot, table
from veracity.report.items import Column, item_table
from veracity.store import RunDir

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
        agg = IsotropyAggregate.from_json(r["aggregate"])
        for key, title in _ANGLES:
            s = agg.angle(key)
            rows.append([_label(r), title, s.n, s.mean, s.stderr, s.median, s.max,
                         _pct(s.share_within_cone), agg.cone])
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
        cone = IsotropyAggregate.from_json(r["aggregate"]).cone
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


def _items(runs: list[RunDir]) -> str:
    rows = []
    for run in runs:
        label = _label(run.results)
        for s in run.samples():
            rows.append({"run": label, "id": str(s.get("id")), "prompt": s["prompt"],
                         "answer": s["answer"], "answer_angle": s.get("answer_angle"),
                         "prompt_angle_mean": s.get("prompt_angle_mean"),
                         "prompt_angle_std": s.get("prompt_angle_std"),
                         "prompt_centroid_angle": s.get("prompt_centroid_angle"),
                         "gamma": s.get("gamma")})
    columns = [Column("run", "run", "cat"), Column("id", "id"), Column("prompt", "question"),
               Column("answer", "answer"),
               Column("answer_angle", "answer angle", "num", digits=2),
               Column("prompt_angle_mean", "prompt angle mean", "num", digits=2),
               Column("prompt_angle_std", "prompt angle std", "num", digits=2),
               Column("prompt_centroid_angle", "prompt centroid angle", "num", digits=2),
               Column("gamma", "γ", "num")]
    if len(runs) == 1:
        columns = columns[1:]
    return item_table("isotropy-items", columns, rows, range_key="answer_angle")


def section(runs: list[RunDir]) -> str:
    """HTML for a group of isotropy runs."""
    parts = [_summary(runs), "<h3>Angle distributions</h3>", _histograms(runs),
             "<h3>Every question (angles in degrees)</h3>", _items(runs)]
    return "".join(parts) + f"<p class='muted'>{fmt(None)} = undefined (empty answer).</p>"
