"""γ of 10k / 100k / 1M recorded items on one machine: time, memory, report size and speed.

For each size: a generated recorded file (bench/fixtures/gamma_fixtures.py: distinct items, N = 3,
about six words an answer, one empty answer in 997), scored by ``veracity gamma --recorded
FILE -e hash/default --out RUN`` in a child process (with its report; a fresh cache), then
the same command again (the rerun: every embedding from the cache). Printed per size: wall
time, items/s, the child's peak RSS (``wait4``), report.html and sidecar sizes, the rerun's
model calls and texts embedded; then the report opened in headless Chromium: time to first
paint with the summary and the first page of items, and the time a γ-range filter takes to
answer (in-page, from the input event to the rows laid out). Last, the slope of each figure
against item count and, as the judged ratio, items/s at the largest size over items/s at the
smallest (target ≥ 0.8: linear time).

Needs chromium and chromium-driver (Debian) and selenium for the browser figures (skipped,
with a line saying so, without them).

    python bench/scale_items.py [--sizes 10000 100000 1000000] [--smoke] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
from gamma_fixtures import write_recorded  # noqa: E402

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,900")
CALLS = re.compile(r"(\d+) model calls, (\d+) cache hits")


def run_child(args: list[str]) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in bytes, stdout) of one veracity command in a child."""
    began = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "veracity", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        sys.exit(f"veracity {' '.join(args)} failed:\n{output[-3000:]}")
    return wall, usage.ru_maxrss * 1024, output


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def browser(profile: Path) -> Any:
    try:
        from selenium import webdriver
    except ImportError:
        return None
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))


FIRST_ROWS = """
var paged = document.querySelector("div.vpaged");
if (paged) return paged.getAttribute("data-renders")
  ? window.veracityReport.paged["gamma-all"].firstPaint : null;
var rows = document.querySelectorAll("div.vtable[data-src='gamma-items'] tbody tr.item");
return rows.length && document.querySelector("table") ? performance.now() : null;
"""
FILTER_SINGLE = """
var input = document.querySelector("div.vtable[data-src='gamma-items'] input.range");
var began = performance.now();
input.value = arguments[0];
input.dispatchEvent(new Event("input"));
document.body.offsetHeight;
return performance.now() - began;
"""


def open_and_filter(driver: Any, report: Path) -> tuple[float, float, float]:
    """(wall seconds to first rows, in-page ms to first rows, ms of a γ ≥ 0.3 filter)."""
    began = time.perf_counter()
    driver.get(report.as_uri())
    first = None
    while first is None:
        first = driver.execute_script(FIRST_ROWS)
        if first is None:
            time.sleep(0.01)
    wall = time.perf_counter() - began
    if driver.execute_script("return !!document.querySelector('div.vpaged')"):
        box = driver.find_element("css selector", "div.vpaged input.range")
        before = int(driver.find_element("css selector", "div.vpaged").get_attribute("data-renders"))
        box.send_keys("0.3")
        while int(driver.find_element("css selector", "div.vpaged")
                  .get_attribute("data-renders")) == before:
            time.sleep(0.01)
        ms = float(driver.execute_script("return window.veracityReport.paged['gamma-all'].lastMs"))
    else:
        ms = float(driver.execute_script(FILTER_SINGLE, "0.3"))
    return wall, float(first), ms


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with a single size)."""
    return statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--smoke", action="store_true", help="300 and 3,000 items, in seconds")
    parser.add_argument("--no-rerun", action="store_true", help="skip the rerun of each size")
    parser.add_argument("--rerun-up-to", type=int, default=None,
                        help="rerun only the sizes up to this many items")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    args = parser.parse_args()
    sizes = [300, 3_000] if args.smoke else args.sizes  # in the order given
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="veracity-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    driver = browser(root / "chromium-profile")
    try:
        for size in sizes:
            work = root / f"n{size}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            recorded = write_recorded(work / "recorded.jsonl", size)
            command = ["gamma", "--recorded", str(recorded), "-e", "hash/default",
                       "--out", str(work / "run"), "--cache", str(work / "cache.sqlite")]
            wall, rss, _ = run_child(command)
            results = json.loads((work / "run" / "results.json").read_text())
            assert results["aggregate"]["n_items"] == size, results["aggregate"]["n_items"]
            row: dict[str, Any] = {
                "items": size, "wall": wall, "items_s": size / wall, "rss": rss,
                "html": (work / "run" / "report.html").stat().st_size,
                "sidecar": tree_bytes(work / "run" / "report.items"),
                "cache": (work / "cache.sqlite").stat().st_size,
            }
            if driver is not None:
                open_wall, first_ms, filter_ms = open_and_filter(driver, work / "run" / "report.html")
                row |= {"open_wall": open_wall, "first_paint_ms": first_ms, "filter_ms": filter_ms}
            print(f"\n[{size} items] load average {os.getloadavg()[0]:.2f}", flush=True)
            for key, value in row.items():
                print(f"{key}_{size}: {value:.4g}" if isinstance(value, float)
                      else f"{key}_{size}: {value}", flush=True)
            if not args.no_rerun and (args.rerun_up_to is None or size <= args.rerun_up_to):
                again, again_rss, output = run_child(command)
                found = CALLS.search(output)
                stats = json.loads((work / "run" / "run.json").read_text())["stats"]
                embedded = sum(v.get("texts_embedded", 0) for k, v in stats.items()
                               if k.startswith("embedder:"))
                row |= {"rerun_wall": again, "rerun_rss": again_rss,
                        "rerun_model_calls": int(found.group(1)) if found else -1,
                        "rerun_embedded": embedded}
            rows.append(row)
            for key in ("rerun_wall", "rerun_rss", "rerun_model_calls", "rerun_embedded"):
                if key in row:
                    print(f"{key}_{size}: {row[key]:.4g}" if isinstance(row[key], float)
                          else f"{key}_{size}: {row[key]}", flush=True)
    finally:
        if driver is not None:
            driver.quit()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    rows.sort(key=lambda r: int(r["items"]))
    if driver is None:
        print("browser figures skipped: needs selenium, chromium and chromium-driver")
    print("\n| items | wall s | items/s | peak RSS MB | report.html MB | sidecar MB | cache MB | "
          "rerun model calls | rerun texts embedded | open s | first paint ms | filter ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['items']:,} | {r['wall']:.1f} | {r['items_s']:.0f} | {r['rss'] / 1e6:.0f} | "
              f"{r['html'] / 1e6:.2f} | {r['sidecar'] / 1e6:.0f} | {r['cache'] / 1e6:.0f} | "
              f"{r.get('rerun_model_calls', '—')} | {r.get('rerun_embedded', '—')} | "
              f"{r.get('open_wall', float('nan')):.2f} | {r.get('first_paint_ms', float('nan')):.0f} | "
              f"{r.get('filter_ms', float('nan')):.0f} |")
    xs = [float(r["items"]) for r in rows]
    if len(rows) > 1:
        print(f"slope_wall: {slope(xs, [r['wall'] for r in rows]) * 1e6:.1f} s per 1M items")
        print(f"slope_peak_rss: {slope(xs, [r['rss'] for r in rows]):.0f} bytes per item")
        print(f"slope_report_html: {slope(xs, [r['html'] for r in rows]):.2f} bytes per item")
        print(f"slope_sidecar: {slope(xs, [r['sidecar'] for r in rows]):.0f} bytes per item")
        if driver is not None:
            print(f"slope_open: {slope(xs, [r['open_wall'] for r in rows]) * 1e6:.3f} s per 1M items")
            print(f"slope_filter: {slope(xs, [r['filter_ms'] for r in rows]) * 1e6:.1f} ms per 1M items")
    biggest = rows[-1]
    print(f"peak_rss_largest: {biggest['rss'] / 1e9:.3f} GB (target <= 1.5)")
    if "open_wall" in biggest:
        print(f"open_largest: {biggest['open_wall']:.2f} s (target <= 2)")
        print(f"filter_largest: {biggest['filter_ms']:.0f} ms (target <= 1000)")
    print(f"items_per_s_ratio: {biggest['items_s'] / rows[0]['items_s']:.3f} "
          "(largest over smallest size; target >= 0.8)")


if __name__ == "__main__":
    main()
