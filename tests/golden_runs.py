"""A fixed set of runs on the fake backend, the hash embedder and the recorded fixtures, each
output file hashed with what changes from run to run (times, the commit, durations) taken out.

Refactorings that must not change a number run this before and after and compare::

    python tests/golden_runs.py --work /tmp/golden --save before.json
    python tests/golden_runs.py --work /tmp/golden --compare before.json

Every run goes through the command line, so moving modules does not break it; ``--work`` is
cleared first and the runs always write to the same paths below it, so paths inside the files
are equal too. The command's printed output (``--json`` and the summary) is hashed as well: a
run without ``--out`` returns its records and aggregates through that output only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"
_VOLATILE_KEYS = {"started", "finished", "git", "versions", "python", "platform", "host"}
_TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
_SECONDS_RE = re.compile(r"\d+(?:\.\d+)?\s*(?:s|ms|seconds)\b")
_HEX_RE = re.compile(r"\b[0-9a-f]{40}\b")
_COMMIT_CELL_RE = re.compile(r"(<td>\d+\.\d+[^<]*</td><td>)[0-9a-f]*(?:\+dirty)?(</td>)")


def _scrub(value: Any) -> Any:
    """A JSON value without the fields that differ between two identical runs."""
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in _VOLATILE_KEYS or "second" in k or k.endswith("_s")
                    or k in {"elapsed", "duration", "wall", "throughput"} else _scrub(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def normalised(path: Path) -> bytes:
    """A file's bytes with timestamps, commits and durations replaced by placeholders."""
    data = path.read_bytes()
    if path.suffix == ".json":
        try:
            parsed = json.loads(data)
        except ValueError:
            return data
        if isinstance(parsed, dict) and (path.name == "run.json" or "stats" in parsed):
            text = json.dumps(_scrub(parsed), ensure_ascii=False, sort_keys=False, indent=1)
            return _TIME_RE.sub("<time>", text).encode()
        return data
    if path.suffix in (".html", ".txt", ".out"):
        text = data.decode("utf-8", "surrogateescape")
        text = _TIME_RE.sub("<time>", text)
        text = _HEX_RE.sub("<commit>", text)
        text = _COMMIT_CELL_RE.sub(r"\1<commit>\2", text)  # the runs table's short commit
        return text.encode("utf-8", "surrogateescape")
    return data


def _stdout_text(text: str) -> str:
    """Printed output with timings taken out (the calls line says how long the model took)."""
    text = _TIME_RE.sub("<time>", text)
    return re.sub(r"(\d+(?:\.\d+)?) ?(s|ms)\b", "<dur>", text)


class Golden:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.outputs: dict[str, str] = {}

    def cli(self, name: str, *args: str) -> None:
        """One command through the command line; its printed output becomes <name>.out."""
        from click.testing import CliRunner

        from veracity.cli import main

        result = CliRunner().invoke(main, list(args), catch_exceptions=False)
        if result.exit_code != 0:
            raise SystemExit(f"{name}: exit {result.exit_code}\n{result.output}")
        (self.work / "stdout").mkdir(exist_ok=True)
        (self.work / "stdout" / f"{name}.out").write_text(_stdout_text(result.output),
                                                          encoding="utf-8")

    def api(self, name: str, call: Callable[[], Any]) -> None:
        """One run through the Python API without a run directory: its records and results
        written to api/<name>.json (the only place they appear)."""
        from veracity.store import dumps

        outcome = call()
        shown = {"records": [r.to_json() for r in outcome]} if isinstance(outcome, list) else \
            {"records": outcome.records_json(), "results": outcome.results}
        (self.work / "api").mkdir(exist_ok=True)
        (self.work / "api" / f"{name}.json").write_text(dumps(shown, indent=1),
                                                       encoding="utf-8")

    def hashes(self) -> dict[str, str]:
        found = {}
        for path in sorted(self.work.rglob("*")):
            if path.is_file() and not path.name.endswith((".sqlite", "-wal", "-shm", ".lock")):
                rel = str(path.relative_to(self.work))
                found[rel] = hashlib.sha256(normalised(path)).hexdigest()
        return found


def _write_inputs(work: Path) -> dict[str, Path]:
    """Copies of the fixtures and small datasets at fixed paths below ``work``."""
    inputs = work / "inputs"
    inputs.mkdir(parents=True)
    shutil.copy(FIXTURES / "gamma_builtin_smollm2.jsonl", inputs / "recorded.jsonl")
    shutil.copytree(FIXTURES / "db-mmlu-mini", inputs / "db-mmlu-mini")
    shutil.copytree(FIXTURES / "formats" / "db-mmlu-recorded", inputs / "db-recorded")
    shutil.copytree(FIXTURES / "db-mmlu-smoke", inputs / "db-mmlu-smoke")
    shutil.copy(FIXTURES / "formats" / "chale.json", inputs / "chale.json")
    shutil.copy(FIXTURES / "formats" / "haltt4llm.json", inputs / "haltt4llm.json")
    words = ["paris", "four", "blue", "river", "king", "the", "red", "no", "yes", "water", "fire",
             "queen"]
    qa = inputs / "qa.jsonl"
    qa.write_text("".join(json.dumps({"question": f"Question number {k}?", "references": [w]})
                          + "\n" for k, w in enumerate(words)), encoding="utf-8")
    return {"recorded": inputs / "recorded.jsonl", "db": inputs / "db-mmlu-mini",
            "db_recorded": inputs / "db-recorded", "db_smoke": inputs / "db-mmlu-smoke",
            "chale": inputs / "chale.json", "haltt4llm": inputs / "haltt4llm.json", "qa": qa}


def run_all(work: Path) -> dict[str, str]:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    os.chdir(work)  # default run directories land below work too
    os.environ["VERACITY_CACHE"] = str(work / "default-cache.sqlite")  # no user cache
    inputs = _write_inputs(work)
    import veracity

    g = Golden(work)
    r = str(work / "runs")
    cache = ["--cache", str(work / "cache.sqlite")]
    fake = ["--model", "fake/unstable", "--embedder", "hash/default"]
    steps: list[tuple[str, Callable[[], None]]] = [
        # γ: live from a dataset into a run directory, and from prompts in memory
        ("gamma-live", lambda: g.cli("gamma-live", "gamma", "--dataset", "builtin", "--limit",
                                     "5", *fake, "-n", "3", "--out", f"{r}/gamma-live", *cache)),
        ("gamma-live-json", lambda: g.cli("gamma-live-json", "gamma", "--dataset", "builtin",
                                          "--limit", "5", *fake, "-n", "3", "--json", "--out",
                                          f"{r}/gamma-live-json", *cache)),
        ("gamma-prompts", lambda: g.cli("gamma-prompts", "gamma", "What is 2+2?",
                                        "Who wrote Hamlet?", "Name a colour.", *fake, "-n", "3",
                                        "--json", *cache)),
        ("gamma-prompts-text", lambda: g.cli("gamma-prompts-text", "gamma", "What is 2+2?",
                                             "Who wrote Hamlet?", *fake, "-n", "3", *cache)),
        ("gamma-paraphrase", lambda: g.cli("gamma-paraphrase", "gamma", "--dataset", "builtin",
                                           "--limit", "3", "--model", "fake/stable",
                                           "--embedder", "hash/default", "-n", "2", "--ball",
                                           "paraphrase", "--paraphraser", "fake/paraphraser", "--out",
                                           f"{r}/gamma-paraphrase",
                                           *cache)),
        # γ from recorded generations: streamed into a run directory and in memory
        ("gamma-recorded", lambda: g.cli("gamma-recorded", "gamma", "--recorded",
                                         str(inputs["recorded"]), "--embedder", "hash/default",
                                         "--out", f"{r}/gamma-recorded")),
        ("gamma-recorded-json", lambda: g.cli("gamma-recorded-json", "gamma", "--recorded",
                                              str(inputs["recorded"]), "--embedder",
                                              "hash/default", "--form", "paper-code", "--json")),
        # the numeric null control, streamed and in memory
        ("gamma-control", lambda: g.cli("gamma-control", "gamma", "--dataset", "builtin",
                                        "--limit", "3", *fake, "-n", "3", "--control", "numeric",
                                        "--out", f"{r}/gamma-control", *cache)),
        ("gamma-control-json", lambda: g.cli("gamma-control-json", "gamma", "What is 2+2?",
                                             "Who wrote Hamlet?", *fake, "-n", "3", "--control",
                                             "numeric", "--json", *cache)),
        # a labelled run, its validation, a calibration, and γ calibrated by it
        ("gamma-labelled", lambda: g.cli("gamma-labelled", "gamma", "--dataset",
                                         f"jsonl:{inputs['qa']}", *fake, "-n", "2", "--out",
                                         f"{r}/gamma-labelled", *cache)),
        ("validate-gamma", lambda: g.cli("validate-gamma", "validate", "gamma",
                                         f"{r}/gamma-labelled", "--baseline-samples", "2",
                                         "--resamples", "100", *cache)),
        ("calibrate", lambda: g.cli("calibrate", "calibrate", f"{r}/gamma-labelled", "--out",
                                    f"{r}/cal/calibration.json", "--resamples", "30",
                                    "--target-precision", "0.8")),
        ("gamma-calibrated", lambda: g.cli("gamma-calibrated", "gamma", "What is 2+2?",
                                           "Who wrote Hamlet?", *fake, "-n", "2",
                                           "--calibration", f"{r}/cal/calibration.json",
                                           "--out", f"{r}/gamma-calibrated", "--json", *cache)),
        ("gamma-calibrated-mem", lambda: g.cli("gamma-calibrated-mem", "gamma", "What is 2+2?",
                                               "Who wrote Hamlet?", *fake, "-n", "2",
                                               "--calibration", f"{r}/cal/calibration.json",
                                               *cache)),
        ("gamma-recorded-calibrated", lambda: g.cli(
            "gamma-recorded-calibrated", "gamma", "--recorded", str(inputs["recorded"]),
            "--embedder", "hash/default", "--calibration", f"{r}/cal/calibration.json",
            "--force", "--out", f"{r}/gamma-recorded-calibrated")),
        # deception: live and recorded
        ("deception", lambda: g.cli("deception", "deception", "run", "-m", "fake/deceive-flaky",
                                    "--dataset", f"db-mmlu:{inputs['db']}", "--subjects",
                                    "anatomy,astronomy", "--limit-per-subject", "5", "--out",
                                    f"{r}/deception", *cache)),
        ("deception-json", lambda: g.cli("deception-json", "deception", "run", "-m",
                                         "fake/deceive", "--dataset", f"db-mmlu:{inputs['db']}",
                                         "--subjects", "marketing", "--limit-per-subject", "3",
                                         "--json", "--out", f"{r}/deception-json", *cache)),
        ("deception-recorded", lambda: g.cli("deception-recorded", "deception",
                                             "score-recorded", "--results",
                                             str(inputs["db_recorded"]), "--dataset",
                                             f"db-mmlu:{inputs['db_smoke']}", "--json", "--out",
                                             f"{r}/deception-recorded")),
        # self-consistency: streamed, in memory, validated
        ("consistency", lambda: g.cli("consistency", "consistency", *fake, "--dataset",
                                      f"jsonl:{inputs['qa']}", "--limit", "6", "-M", "3",
                                      "--out", f"{r}/consistency", *cache)),
        ("consistency-json", lambda: g.cli("consistency-json", "consistency", *fake, "-M", "3",
                                           "What is 2+2?", "Who wrote Hamlet?", "--json",
                                           *cache)),
        ("validate-consistency", lambda: g.cli("validate-consistency", "validate",
                                               "consistency", f"{r}/consistency", "--resamples",
                                               "100", *cache)),
        # FEWL: run, rank, select, validate
        ("fewl-run", lambda: g.cli("fewl-run", "fewl", "run", "--dataset", "builtin", "--limit",
                                   "8", "--answers", "fake/stable", "--answers", "fake/unstable",
                                   *_FEWL, "--out", f"{r}/fewl-run", *cache)),
        ("fewl-rank", lambda: g.cli("fewl-rank", "fewl", "rank", "--dataset",
                                    f"haltt4llm:{inputs['haltt4llm']}", "--limit", "10",
                                    "--answers", "fake/stable", "--answers", "fake/echo",
                                    "--answers", "fake/empty", *_FEWL, "--out",
                                    f"{r}/fewl-rank", *cache)),
        ("fewl-select", lambda: g.cli("fewl-select", "fewl", "select", "--dataset", "builtin",
                                      "--limit", "8", "--candidates", "fake/unstable",
                                      "--samples", "3", "--icl-examples", "2", *_FEWL, "--out",
                                      f"{r}/fewl-select", *cache)),
        ("fewl-validate", lambda: g.cli("fewl-validate", "fewl", "validate", "--dataset",
                                        f"chale:{inputs['chale']}", "--limit", "10", *_FEWL,
                                        "--out", f"{r}/fewl-validate", *cache)),
        # γ's sub-methods: the adversarial search and the isotropy of the ball
        ("attack", lambda: g.cli("attack", "attack", "--prompt", "What is the capital of France?",
                                 "--model", "fake/slope", "--embedder", "hash/default",
                                 "--steps", "3", "-n", "4", "--out", f"{r}/attack", *cache)),
        ("isotropy", lambda: g.cli("isotropy", "isotropy", "--dataset", "builtin", "--limit",
                                   "4", *fake, "-n", "4", "--cone", "20", "--out",
                                   f"{r}/isotropy", *cache)),
        # the Python API, in memory
        ("api-deception", lambda: g.api("api-deception", lambda: veracity.deception(
            f"db-mmlu:{inputs['db']}", "fake/deceive-flaky", subjects=["anatomy", "virology"],
            limit_per_subject=4, cache=work / "cache.sqlite"))),
        ("api-score-deception", lambda: g.api("api-score-deception",
                                              lambda: veracity.score_deception(
                                                  inputs["db_recorded"],
                                                  f"db-mmlu:{inputs['db_smoke']}"))),
        ("api-consistency", lambda: g.api("api-consistency", lambda: veracity.consistency(
            ["What is 2+2?", "Name a river."], "fake/unstable", "hash/default", m=3,
            cache=work / "cache.sqlite"))),
        ("api-fewl", lambda: g.api("api-fewl", lambda: veracity.fewl(
            "builtin", ["fake/stable", "fake/unstable"], ["fake/pairs"], "hash/default",
            cache=work / "cache.sqlite"))),
        ("api-gamma", lambda: g.api("api-gamma", lambda: veracity.gamma(
            ["What is 2+2?", "Name a river."], "fake/unstable", "hash/default", n=3,
            cache=work / "cache.sqlite"))),
        # everything again from the cache: the same files
        ("gamma-live-again", lambda: g.cli("gamma-live-again", "gamma", "--dataset", "builtin",
                                           "--limit", "5", *fake, "-n", "3", "--out",
                                           f"{r}/gamma-live-again", *cache)),
        ("report", lambda: g.cli("report", "report", f"{r}/gamma-live", f"{r}/deception",
                                 f"{r}/consistency", f"{r}/fewl-run", "--out",
                                 f"{r}/combined.html")),
    ]
    for name, step in steps:
        print(f"golden: {name}", file=sys.stderr, flush=True)
        step()
    shutil.rmtree(work / "inputs")
    return g.hashes()


_FEWL = ["--reference", "fake/pairs", "--reference-samples", "3", "--pairs", "4",
         "--neighbours", "3", "--similarity", "hash/default"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="Directory the runs go to "
                        "(cleared first).")
    parser.add_argument("--save", type=Path, help="Write the hashes to this JSON file.")
    parser.add_argument("--compare", type=Path, help="Compare with hashes saved earlier.")
    args = parser.parse_args()
    hashes = run_all(args.work.resolve())
    if args.save:
        args.save.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n",
                             encoding="utf-8")
        print(f"{len(hashes)} files hashed into {args.save}")
    if args.compare:
        before = json.loads(args.compare.read_text(encoding="utf-8"))
        changed = sorted(k for k in before.keys() & hashes.keys() if before[k] != hashes[k])
        missing, added = sorted(before.keys() - hashes.keys()), sorted(hashes.keys() - before)
        for label, names in (("changed", changed), ("missing", missing), ("new", added)):
            for name in names:
                print(f"{label}: {name}")
        same = not (changed or missing or added)
        print(f"{len(hashes)} files: " + ("byte-identical" if same else
              f"{len(changed)} changed, {len(missing)} missing, {len(added)} new"))
        raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
