"""``veracity doctor``: checks, a crashing probe reported as a failed check, the JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity import doctor
from veracity.cli import main


def test_a_missing_extra_is_a_failed_check_with_its_install_command() -> None:
    checks = {c.name: c for c in doctor.check_extras(lambda module: module != "ray")}
    ray = checks["extra [ray]"]
    assert (ray.ok, ray.required, ray.fix) == (False, False, "pip install 'veracity[ray]'")
    assert "missing ray" in ray.detail
    assert checks["extra [llamacpp]"].ok and checks["extra [llamacpp]"].required
    # an optional extra missing leaves the verdict ok; a required one does not
    assert doctor.report([ray], 0.1)["ok"] is True
    missing_model = {c.name: c for c in doctor.check_extras(lambda m: m != "llama_cpp")}
    assert doctor.report([missing_model["extra [llamacpp]"]], 0.1)["ok"] is False


def test_a_probe_that_segfaults_is_a_failed_check_naming_the_signal() -> None:
    result, error = doctor.run_probe("import ctypes; ctypes.string_at(0)", timeout=60)
    assert result is None
    assert error == "crashed with SIGSEGV (exit 139)"


def test_a_probe_that_hangs_or_fails_says_so() -> None:
    assert doctor.run_probe("import time; time.sleep(30)", timeout=1) == (None, "no answer within 1 s")
    result, error = doctor.run_probe("raise SystemExit('the model file is gone')", timeout=60)
    assert result is None and error == "failed (exit 1): the model file is gone"
    assert doctor.run_probe("print('{\"x\": 1}')", timeout=60) == ({"x": 1}, "")


def test_the_model_check_reports_a_crash_with_a_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "PROBE_MODEL", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    check = doctor.check_model(timeout=60)
    if "not installed" in check.detail:
        pytest.skip("needs the llamacpp extra")
    assert not check.ok and check.required
    assert "crashed with SIGSEGV" in check.detail
    assert "extra_buffers=off" in check.fix


def test_doctor_json_shape_and_exit_status(monkeypatch: pytest.MonkeyPatch) -> None:
    result = CliRunner().invoke(main, ["doctor", "--json", "--no-models"])
    data = json.loads(result.output)
    assert set(data) == {"ok", "seconds", "checks"}
    names = [c["name"] for c in data["checks"]]
    assert names[:2] == ["python", "extra [llamacpp]"] and "cpu" in names and "cache" in names
    for check in data["checks"]:
        assert set(check) == {"name", "ok", "detail", "fix", "required"}
    assert result.exit_code == (0 if data["ok"] else 1)
    monkeypatch.setattr(doctor, "check_python", lambda: doctor.Check("python", False, "Python 3.8", "x"))
    failed = CliRunner().invoke(main, ["doctor", "--no-models"])
    assert failed.exit_code == 1
    assert "✗ python" in failed.output and "fix: x" in failed.output
    assert "a required check failed" in failed.output


def test_the_cache_check_fails_clearly_on_an_unwritable_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("VERACITY_HOME", str(blocker / "home"))
    check = doctor.check_home()
    assert not check.ok and "not writable" in check.detail and "VERACITY_HOME" in check.fix


def test_a_base_url_is_checked_for_an_answer() -> None:
    bad = doctor.check_base_url("ftp://example")
    assert not bad.ok and "not an http(s) URL" in bad.detail
    closed = doctor.check_base_url("http://user:secret@127.0.0.1:9/v1", timeout=2)
    assert not closed.ok and "secret" not in closed.detail


def test_the_cache_check_wants_room_for_the_write_ahead_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VERACITY_HOME", str(tmp_path))
    from veracity.paths import default_cache_path

    cache = default_cache_path()
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(b"\0" * (8 << 20))  # an 8 MiB cache: its log may reach 4 MiB
    assert doctor.cache_space_wanted(cache) == doctor.MIN_FREE_BYTES + (4 << 20)
    monkeypatch.setattr(doctor, "MIN_FREE_BYTES", 1 << 60)
    check = doctor.check_home()
    assert not check.ok and "wants" in check.detail and "operations.md" in check.fix


def test_the_temp_check_names_tmpdir(tmp_path: Path) -> None:
    assert doctor.check_temp(wanted=1).ok
    low = doctor.check_temp(wanted=1 << 60)
    assert not low.ok and not low.required and "TMPDIR" in low.fix
