"""Every (sub)method folder follows consistency's file template and every target the registry
names loads; a copy of consistency/ renamed to a new method works after adding only its
registration line (its commands, report, drill-down, fake backend, import contracts)."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

import veracity
import veracity.methods
from veracity.backends.fake import FakeBackend, mode_names
from veracity.method import MethodSpec, Part, fake_modes, load_target, methods
from veracity.report.html import package_text
from veracity.types import GenRequest

METHODS_DIR = Path(veracity.methods.__file__).parent
ROOT = Path(__file__).resolve().parents[1]
MAX_FILES = 15

TEMPLATE = {"record": "records", "sections": "report", "commands": "cli", "api": "api"}
"""Which module of a (sub)method folder a spec's target of each kind lives in."""


def _folders(base: Path = METHODS_DIR) -> list[Path]:
    return sorted(p.parent for p in base.rglob("__init__.py")
                  if p.parent != base and "__pycache__" not in p.parts)


def _package(folder: Path, base: Path = METHODS_DIR) -> str:
    return ".".join(("veracity", "methods", *folder.relative_to(base).parts))


def _module(target: str) -> str:
    return target.partition(":")[0]


def template_problems(folder: Path, package: str) -> list[str]:
    """What keeps ``folder`` (the package ``package``) from following the template."""
    problems: list[str] = []
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    if len(files) > MAX_FILES:
        problems.append(f"{package}: {len(files)} files at its top level (at most {MAX_FILES})")
    problems += [f"{package}: {name} (name files by their job, not cli_/run_/report_)"
                 for name in files if name.startswith(("cli_", "run_", "report_"))]
    if "core.py" not in files:
        problems.append(f"{package}: no core.py")
    declared = importlib.import_module(package)
    specs: list[MethodSpec | Part] = [*getattr(declared, "METHODS", ())]
    if hasattr(declared, "PART"):
        specs.append(declared.PART)
    if not specs:
        problems.append(f"{package}: its __init__ declares neither METHODS nor PART")
    for spec in specs:
        targets = {"sections": [s.target for s in spec.sections],
                   "commands": [c.target for c in spec.commands], "api": list(spec.api)}
        if isinstance(spec, MethodSpec):
            targets["record"] = [spec.record]
        for kind, names in targets.items():
            for target in names:
                module = _module(target)
                # a method's own target, or one a sub-folder's part added
                if not (module.startswith(package + ".")
                        and module.rpartition(".")[2] == TEMPLATE[kind]):
                    problems.append(f"{package}: {kind} target {target} is not in "
                                    f"a {TEMPLATE[kind]}.py of this folder or a sub-folder")
        for script in spec.scripts:
            owner, _, name = script.partition(":")
            if name != "drill.js" or not (owner == package or owner.startswith(package + ".")):
                problems.append(f"{package}: script {script} is not a drill.js of this folder")
    return problems


def test_every_method_folder_follows_the_template() -> None:
    folders = _folders()
    assert {f.name for f in folders} >= {"gamma", "attack", "isotropy", "calibration",
                                         "validation", "fewl", "mitigation", "annotation"}
    problems = [p for folder in folders for p in template_problems(folder, _package(folder))]
    assert not problems, "\n".join(problems)


def test_template_problems_are_found(tmp_path: Path) -> None:
    """The check itself fails on a folder that breaks the template."""
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ["__init__.py", "cli_extra.py", *(f"m{i}.py" for i in range(MAX_FILES))]:
        (bad / name).write_text("")
    problems = template_problems(bad, "veracity.method")  # a module without METHODS or PART
    assert any("files at its top level" in p for p in problems)
    assert any("cli_extra.py" in p for p in problems)
    assert any("no core.py" in p for p in problems)
    assert any("neither METHODS nor PART" in p for p in problems)


def test_every_part_and_sub_method_is_registered() -> None:
    """A sub-folder's METHODS reach the registry and its PART's commands a registered method."""
    registered = {m.name for m in methods()}
    commands = {c.target for m in methods() for c in m.commands}
    sections = {s.target for m in methods() for s in m.sections}
    for folder in _folders():
        declared = importlib.import_module(_package(folder))
        assert {m.name for m in getattr(declared, "METHODS", ())} <= registered, folder
        part = getattr(declared, "PART", None)
        if part is not None:
            assert {c.target for c in part.commands} <= commands, folder
            assert {s.target for s in part.sections} <= sections, folder


def test_every_registered_target_loads() -> None:
    for method in methods():
        assert method.record_type().from_json  # the typed record of samples.jsonl
        for section in method.sections:
            assert callable(section.load()), section.target
        for command in method.commands:
            assert isinstance(command.load(), click.Command), command.target
        for target in method.api:
            name = target.rpartition(":")[2]
            assert getattr(veracity, name) is load_target(target), target
            assert name in veracity.__all__, name
        for script in method.scripts:
            assert package_text(script).strip(), script
        if method.compare_json:
            assert callable(load_target(method.compare_json))


def test_method_fake_modes_answer_and_are_listed() -> None:
    """Each method's scripted models load through ``fake/<name>`` and ``veracity models`` lists
    them beside the generic ones."""
    from click.testing import CliRunner

    from veracity.cli import main

    brought = fake_modes()
    assert {"deceive", "deceive-flaky", "misleader", "pairs", "paraphraser", "judge",
            "context", "slope"} <= set(brought)
    listing = CliRunner().invoke(main, ["models"]).output
    request = GenRequest.user("Rewrite the question below.\n\nQuestion: Why is the sky blue?")
    for name in [*brought, "echo"]:
        assert name in mode_names()
        assert f"fake/{name}" in listing
        [generation] = FakeBackend(name).generate([request])
        assert isinstance(generation.text, str)


def test_public_api_comes_from_the_specs() -> None:
    """``veracity.__all__`` names every public function a method's spec declares, and the
    consistency method is among them."""
    api = {t.rpartition(":")[2] for m in methods() for t in m.api}
    assert {"gamma", "deception", "fewl", "consistency"} <= api
    assert api <= set(veracity.__all__)


def _copy_consistency(tmp: Path, name: str) -> Path:
    """The source tree with consistency/ copied to methods/<name>/, renamed the way a newcomer
    would (every ``consistency`` / ``Consistency`` in the copy), plus its registration line."""
    src = tmp / "src"
    shutil.copytree(ROOT / "src" / "veracity", src / "veracity",
                    ignore=shutil.ignore_patterns("__pycache__"))
    new = src / "veracity" / "methods" / name
    shutil.copytree(src / "veracity" / "methods" / "consistency", new)
    for path in new.iterdir():
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"consistency", name, text)
        text = re.sub(r"Consistency", name.capitalize(), text)
        path.write_text(text, encoding="utf-8")
    registry = src / "veracity" / "method.py"
    line = '    "veracity.methods.consistency:METHODS",\n'
    text = registry.read_text(encoding="utf-8")
    assert line in text
    registry.write_text(text.replace(line, line + f'    "veracity.methods.{name}:METHODS",\n'),
                        encoding="utf-8")
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return src


CHECK = """
import json, sys
from pathlib import Path
from click.testing import CliRunner
import veracity
from veracity.cli import main
from veracity.method import get_method
sys.path.insert(0, sys.argv[1])
from test_method_template import template_problems

name = sys.argv[2]
folder = Path(veracity.__file__).parent / "methods" / name
out = Path(sys.argv[3])
method = get_method(name)
problems = template_problems(folder, "veracity.methods." + name)
run = CliRunner().invoke(main, [name, "--model", "fake/unstable", "--embedder", "hash/default",
                                "-M", "2", "--out", str(out), "--cache", str(out.parent / "c.db"),
                                "What is the capital of France?"])
report = (out / "report.html").read_text() if (out / "report.html").exists() else ""
print(json.dumps({"problems": problems, "exit": run.exit_code, "output": run.output,
                  "method": json.loads((out / "run.json").read_text())["method"],
                  "api": callable(getattr(veracity, name)),
                  "drill": 'veracityDrills.register("' + name + '"' in report,
                  "validate": name in main.get_command(None, "validate").list_commands(None)}))
"""


@pytest.mark.slow
def test_a_renamed_copy_of_consistency_works_after_its_registration_line(tmp_path: Path) -> None:
    name = "agreement"
    src = _copy_consistency(tmp_path, name)
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", CHECK, str(Path(__file__).parent), name,
                           str(tmp_path / "run")], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["problems"] == []
    assert seen["exit"] == 0, seen["output"]
    assert seen["method"] == name and seen["api"] and seen["drill"] and seen["validate"]
    # the import contracts guard the new folder with no edit: clean, then broken by one import
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None
    kept = subprocess.run([lint, "--no-cache"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert kept.returncode == 0, kept.stdout[-3000:]
    core = src / "veracity" / "methods" / name / "core.py"
    core.write_text(core.read_text() + "\nfrom veracity.methods.fewl import core as _fewl\n")
    broken = subprocess.run([lint, "--no-cache"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600, check=False)
    assert broken.returncode != 0
    assert f"veracity.methods.{name}" in broken.stdout


def _commands(command: click.Command, path: str = "veracity") -> list[tuple[str, click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in command.list_commands(click.Context(command)):
            sub = command.get_command(click.Context(command), name)
            assert sub is not None
            found += _commands(sub, f"{path} {name}")
    return found


def test_no_command_takes_untyped_keywords() -> None:
    """Every command's function takes named, typed parameters (most one options dataclass),
    never ``**kw``."""
    import inspect

    from veracity.cli import main

    loose = []
    for path, command in _commands(main):
        if command.callback is None:
            continue
        inner = inspect.unwrap(command.callback)
        params = inspect.signature(inner).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            loose.append(path)
    assert len(_commands(main)) > 30
    assert not loose, loose
