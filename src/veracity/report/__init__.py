"""``veracity report``: one self-contained HTML file built from run directories alone."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from veracity.data.model_info import read_model_info
from veracity.errors import DataError
from veracity.report.html import esc, page, plain_text_labels, table
from veracity.store import RunDir

Section = Callable[[list[RunDir]], str]
SECTIONS: dict[str, str] = {
    "gamma": "veracity.report.gamma:section",
    "deception": "veracity.report.deception:section",
    "fewl": "veracity.report.fewl:section",
    "attack": "veracity.report.attack:section",
    "isotropy": "veracity.report.isotropy:section",
    "mitigation": "veracity.report.mitigation:section",
}
TITLES = {"gamma": "Harmonic γ", "deception": "Deception-based benchmarking", "fewl": "FEWL",
          "attack": "Adversarial γ search", "isotropy": "Isotropy of the ball",
          "mitigation": "Reducing hallucination with FEWL (ICL and fine-tuning)"}
# Files that later commands add to a run directory; shown for every run that holds one.
FILE_SECTIONS: dict[str, str] = {
    "validation.json": "veracity.report.validate:section",
    "ratings.json": "veracity.report.validate:ratings_section",
}
TITLES |= {"validation.json": "Validation against labels", "ratings.json": "Human ratings"}


def _section_for(method: str) -> Section:
    target = SECTIONS.get(method) or FILE_SECTIONS.get(method)
    if target is None:
        raise DataError(f"no report section for method '{method}'")
    module, _, attr = target.partition(":")
    return cast(Section, getattr(importlib.import_module(module), attr))


def _runs_table(runs: Sequence[RunDir]) -> str:
    rows = []
    for run in runs:
        info = run.info
        git = info.get("git") or {}
        rows.append([str(run.path), info.get("method"), info.get("started"),
                     info.get("versions", {}).get("veracity", "?"), git.get("commit", "")[:10]])
    return "<h2>Runs</h2>" + table(["directory", "method", "started", "veracity", "commit"], rows)


def _owns(run: RunDir, name: str) -> bool:
    """The run holds ``name`` and its run.json lists it (older runs list nothing)."""
    files = run.info.get("files")
    return (run.path / name).is_file() and (files is None or name in files)


def _guarded(section: Section, runs: list[RunDir], files: str) -> str:
    """A section, or a DataError naming the runs when their files do not have the shape
    veracity writes (edited by hand, truncated, or from another tool)."""
    try:
        return section(runs)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        where = ", ".join(str(run.path) for run in runs)
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)[:200]
        raise DataError(f"{where}: {files} is not what veracity wrote ({detail})") from None


def build_report(paths: Sequence[Path], out: Path, title: str = "veracity report",
                 model_info: Path | None = None) -> Path:
    """Write one HTML file comparing the runs, grouped by method; ``model_info`` (a CSV of
    model sizes and external scores) feeds the deception comparison."""
    runs = [RunDir.open(p) for p in paths]
    if not runs:
        raise DataError("no run directories given")
    by_method: dict[str, list[RunDir]] = {}
    for run in runs:
        by_method.setdefault(run.method, []).append(run)
    info = None
    if model_info is not None:
        if "deception" not in by_method:
            raise DataError("--model-info is for comparing deception runs, and none is given")
        info = read_model_info(model_info)
    sections = [_guarded(_runs_table, runs, "run.json")]
    with plain_text_labels():
        for method, group in by_method.items():
            sections.append(f"<h2>{esc(TITLES.get(method, method))}</h2>")
            sections.append(_guarded(_section_for(method), group, "results.json / samples.jsonl"))
            if method == "deception":
                compare = importlib.import_module("veracity.report.deception_compare")
                section = functools.partial(compare.section, info=info)
                sections.append("<h3>Comparison across models</h3>"
                                + _guarded(section, group, "results.json / samples.jsonl"))
        for name in FILE_SECTIONS:
            holding = [run for run in runs if _owns(run, name)]
            if holding:
                sections.append(f"<h2>{esc(TITLES[name])}</h2>")
                sections.append(_guarded(_section_for(name), holding, name))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(title, sections), encoding="utf-8")
    return out
