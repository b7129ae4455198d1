"""Small run directories of every method on the fake backend, for report tests."""

from __future__ import annotations

from pathlib import Path

from veracity.data.qa import load_items
from veracity.methods.deception.run import run_deception
from veracity.methods.fewl.modes import run_fewl
from veracity.methods.fewl.pairs import PairSettings
from veracity.methods.fewl.run import AnswerSource, FewlSettings
from veracity.methods.gamma.attack.core import AttackSettings
from veracity.methods.gamma.attack.run import run_attack
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.isotropy.run import run_isotropy
from veracity.methods.gamma.run import run_gamma
from veracity.runs.common import Context
from veracity.types import Item, MCItem

# Each would change document.title if any of it ran as script or markup.
PAYLOADS = (
    "</script><script>document.title='pwned-1'</script>",
    "<img src=x onerror=\"document.title='pwned-2'\">",
    "\"><svg onload=\"document.title='pwned-3'\">",
    "<!--<script>document.title='pwned-4'</script>-->",
    "' onmouseover='document.title=\"pwned-5\"' x='",
    "<iframe srcdoc=\"<script>parent.document.title='pwned-6'</script>\"></iframe>",
    "=HYPERLINK(\"http://example.invalid\",\"pwned-7\")",
    "\u202e\x1b[31mred\x00 & \u2028 line",
)


def gamma_runs(root: Path, ctx: Context, items: list[Item] | None = None,
               models: tuple[str, ...] = ("fake/unstable", "fake/stable")) -> list[Path]:
    """One γ run per model on the same items (default: 12 built-in questions), N = 4."""
    items = items or load_items("builtin", limit=12)
    paths = []
    for model in models:
        out = root / f"gamma-{model.replace('/', '-')}"
        run_gamma(items, model, "hash/default", GammaSettings(n=4), ctx, out=out)
        paths.append(out)
    return paths


def mc_items(prefix: str = "", count: int = 4) -> list[MCItem]:
    """Items in two subjects; ``prefix`` goes into subjects, questions and options."""
    items = []
    for subject in (f"{prefix}anatomy", f"{prefix}virology"):
        for i in range(count):
            items.append(MCItem(
                f"{subject}-{i}", subject, f"{prefix}Which option is right in case {i}?",
                (f"{prefix}first", "second", "third", "fourth"), "ABCD"[i % 4],
                f"Let's reason step by step. {prefix}Option {'DCBA'[i % 4]} is what the "
                "textbook says."))
    return items


def deception_runs(root: Path, ctx: Context, prefix: str = "") -> list[Path]:
    paths = []
    items = mc_items(prefix)
    for model in ("fake/deceive", "fake/deceive-flaky"):
        out = root / f"deception-{model.replace('/', '-')}"
        run_deception(model, "mc-jsonl:fixture.jsonl", ctx, out=out, items=items)
        paths.append(out)
    return paths


def fewl_runs(root: Path, ctx: Context, items: list[Item] | None = None,
              source_names: tuple[str, str] = ("fake/stable", "fake/unstable")) -> list[Path]:
    items = items or load_items("builtin", limit=6)
    settings = FewlSettings(references=("fake/pairs",), reference_samples=3,
                            pairs=PairSettings(r=4), similarity="hash/default", neighbours=3)
    sources = [AnswerSource(name, model=model)
               for name, model in zip(source_names, ("fake/stable", "fake/unstable"), strict=True)]
    out = root / "fewl"
    run_fewl(items, sources, settings, ctx, out=out, dataset="builtin")
    return [out]


def other_runs(root: Path, ctx: Context) -> list[Path]:
    """An adversarial search and an isotropy check."""
    run_attack("What is the capital of France?", "fake/slope", "hash/default",
               AttackSettings(steps=3, n=4), ctx, root / "attack")
    run_isotropy(load_items("builtin", limit=8), "fake/unstable", "hash/default",
                 GammaSettings(n=4), ctx, out=root / "isotropy")
    return [root / "attack", root / "isotropy"]
