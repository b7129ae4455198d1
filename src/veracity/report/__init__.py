"""``veracity report``: one self-contained HTML file built from run directories alone."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

from veracity.data.model_info import PAPER, ModelInfo, paper_model_info, read_model_info
from veracity.errors import DataError
from veracity.jsontypes import JsonObject
from veracity.method import get_method, load_target, methods
from veracity.report.html import esc, page, plain_text_labels, table
from veracity.report.sidecar import beside
from veracity.space import writing
from veracity.store import RunDir
from veracity.terminal import harmless_warnings

Section = Callable[[list[RunDir]], str]
"""A report section: the runs it covers -> HTML."""
def _method_sections(method: str, runs: list[RunDir], info: ModelInfo | None) -> list[str]:
    """The registered method's title and sections for its runs."""
    registered = get_method(method)
    html = [f"<h2>{esc(registered.title)}</h2>"]
    for part in registered.sections:
        if part.file:
            continue
        loaded = part.load()
        section: Section = functools.partial(loaded, info=info) if part.model_info else loaded
        heading = f"<h3>{esc(part.title)}</h3>" if part.title else ""
        html.append(heading + _guarded(section, runs, "results.json / samples.jsonl"))
    return html


def compare_json(runs: Sequence[RunDir]) -> JsonObject:
    """``veracity report --json``: each method's comparison of its runs, by method name."""
    by_method: dict[str, list[RunDir]] = {}
    for run in runs:
        by_method.setdefault(run.method, []).append(run)
    out: JsonObject = {}
    for method, group in by_method.items():
        target = get_method(method).compare_json
        if not target:
            raise DataError(f"{method} runs have no JSON comparison; write the HTML report")
        out[method] = load_target(target)(group)
    return out


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
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, DataError) as exc:
        where = ", ".join(str(run.path) for run in runs)
        if isinstance(exc, DataError) and any(str(run.path) in str(exc) for run in runs):
            raise  # it names its run already
        # a typed reader's DataError says which field; this says which run and file
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)[:200]
        raise DataError(f"{where}: {files} is not what veracity wrote ({detail})") from None


def build_report(paths: Sequence[Path], out: Path, title: str = "veracity report",
                 model_info: Path | str | None = None) -> Path:
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
        takers = [m.name for m in methods() if any(s.model_info for s in m.sections)]
        if not set(takers) & set(by_method):
            raise DataError(f"--model-info is for comparing {' or '.join(takers)} runs, and none "
                            "is given")
        info = (paper_model_info() if isinstance(model_info, str) and model_info == PAPER
                else read_model_info(Path(model_info)))
    sections = [_guarded(_runs_table, runs, "run.json")]
    with writing(out.parent, "the report's folder"):
        out.parent.mkdir(parents=True, exist_ok=True)
    # large item tables: rows beside out; warnings raised drawing dataset text shown harmless
    with plain_text_labels(), beside(out) as sidecar, harmless_warnings():
        for method, group in by_method.items():
            sections += _method_sections(method, group, info)
        for method, part in ((m.name, s) for m in methods() for s in m.sections if s.file):
            holding = [run for run in by_method.get(method, []) if _owns(run, part.file)]
            if holding:
                sections.append(f"<h2>{esc(part.title)}</h2>")
                sections.append(_guarded(part.load(), holding, part.file))
    scripts = [s for m in methods() for s in m.scripts]
    html = page(title, sections, scripts, scripts_beside=sidecar.used)
    with writing(out, "the report"):
        out.write_text(html, encoding="utf-8")
    return out
