"""``import veracity`` and the CLI stay light: no torch, llama_cpp, transformers, ..."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "llama_cpp", "transformers", "sentence_transformers", "matplotlib", "trl", "peft",
         "datasets")


def _loaded_after(statement: str) -> set[str]:
    code = f"{statement}; import sys; print(','.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.strip().split(","))


def test_import_veracity_loads_no_heavy_module() -> None:
    loaded = _loaded_after("import veracity")
    assert not [m for m in HEAVY if m in loaded]


def test_cli_import_loads_no_heavy_module() -> None:
    loaded = _loaded_after("import veracity.cli")
    assert not [m for m in HEAVY if m in loaded]
