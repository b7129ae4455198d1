"""Issue 42: every text that reaches a terminal is harmless, warnings raised while drawing
figures included (matplotlib's "Glyph 27 (\\x1b) missing from font" repeated the raw character
for deception's subject names).

Each method runs from the command line on questions, ids and subjects holding ESC, BEL and a
right-to-left override; then its model is renamed to such a name in the run files and
``veracity report`` draws every method's figures. Nothing either prints may hold them raw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HOSTILE = "\x1b[31m\x07\u202e"
RAW = ("\x1b", "\x07", "\u202e")


def veracity(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "always", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "veracity", *args], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def harmless(done: subprocess.CompletedProcess[str]) -> None:
    for text in (done.stdout, done.stderr):
        assert not [c for c in RAW if c in text], text[-3000:]


def _qa(path: Path) -> Path:
    rows = [{"id": f"q{i}{HOSTILE}", "question": f"Name {HOSTILE} the colour number {i}.",
             "answer": f"colour {i}{HOSTILE}"} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _mc(path: Path) -> Path:
    rows = [{"id": f"m{i}{HOSTILE}", "subject": f"anatomy{HOSTILE}" if i % 2 else f"viro{HOSTILE}",
             "question": f"Which {HOSTILE} option is right in case {i}?",
             "options": ["first", "second", "third", "fourth"], "answer": i % 4,
             "misleading_start": f"Let's reason step by step. {HOSTILE} Option A is right."}
            for i in range(8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _rename_models(run: Path) -> None:
    """Every fake model spec in the run's files becomes a name holding the hostile text."""
    escaped = json.dumps(HOSTILE)[1:-1]
    for file in run.iterdir():
        if file.suffix in (".json", ".jsonl"):
            text = file.read_text(encoding="utf-8")
            file.write_text(text.replace('"fake/', f'"{escaped}fake/'), encoding="utf-8")


def test_every_methods_run_and_report_print_nothing_raw(tmp_path: Path) -> None:
    qa, mc = _qa(tmp_path / "qa.jsonl"), _mc(tmp_path / "mc.jsonl")
    cache = ["--cache", str(tmp_path / "cache.sqlite")]
    runs = {
        "gamma": ["gamma", "--dataset", f"jsonl:{qa}", "--model", "fake/unstable", "--embedder",
                  "hash/default", "-n", "3"],
        "deception": ["deception", "run", "--dataset", f"mc-jsonl:{mc}", "--model",
                      "fake/deceive"],
        "fewl": ["fewl", "run", "--dataset", f"jsonl:{qa}", "--answers", "fake/stable",
                 "--answers", "fake/unstable", "--reference", "fake/pairs",
                 "--reference-samples", "3", "--pairs", "4", "--neighbours", "3",
                 "--similarity", "hash/default"],
        "consistency": ["consistency", "--dataset", f"jsonl:{qa}", "--model", "fake/unstable",
                        "--embedder", "hash/default"],
    }
    for name, args in runs.items():
        harmless(veracity(*args, "--out", str(tmp_path / name), *cache))
        _rename_models(tmp_path / name)
    for name in runs:
        harmless(veracity("report", str(tmp_path / name), "--out", str(tmp_path / f"{name}.html")))
    harmless(veracity("report", *(str(tmp_path / n) for n in runs), "--out",
                      str(tmp_path / "all.html")))
