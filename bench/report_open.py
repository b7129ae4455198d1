"""How fast a large γ report opens and sorts in headless Chromium, and how big the file is.

Scores 5,000 questions with γ (fake model, hashing embedder, N = 10, no cache), writes the
report, opens it in headless Chromium through Selenium and measures: the time from navigation
start to the end of the load event (the page parses its JSON and renders the item table while
loading), and the time to sort all items by γ (click to laid-out rows; median of 5). The last
line is (open + sort) / 1 s: under 1 meets the target of opening and sorting in under a second.

Needs chromium and chromium-driver (Debian packages) and selenium.

    python bench/report_open.py [--items 5000] [--smoke]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from veracity.data.qa import load_items
from veracity.methods.gamma.core import GammaSettings
from veracity.methods.gamma.run import run_gamma
from veracity.report import build_report
from veracity.runs.common import Context
from veracity.types import Item

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,900")
SORT = """
var th = document.querySelector("div.vtable[data-src='gamma-items'] th[data-key='gamma']");
var began = performance.now();
th.click();
document.body.offsetHeight;  // force layout of the new rows
return performance.now() - began;
"""


def items(count: int) -> list[Item]:
    """``count`` distinct questions built from the bundled ones."""
    base = load_items("builtin")
    return [Item(f"q{i}", f"{base[i % len(base)].question} (case {i})") for i in range(count)]


def browser(profile: Path) -> Any:
    from selenium import webdriver

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        sys.exit("needs chromium and chromium-driver: apt-get install -y chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--smoke", action="store_true", help="200 items: seconds, same code path")
    args = parser.parse_args()
    count = 200 if args.smoke else args.items
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        began = time.perf_counter()
        ctx = Context(cache=None)
        run_gamma(items(count), "fake/unstable", "hash/default", GammaSettings(n=10), ctx,
                  out=root / "run")
        ctx.close()
        scored = time.perf_counter() - began
        began = time.perf_counter()
        page = build_report([root / "run"], root / "report.html")
        built = time.perf_counter() - began
        size = page.stat().st_size
        session = browser(root / "profile")
        try:
            session.get(page.as_uri())
            opened = session.execute_script(
                "return performance.getEntriesByType('navigation')[0].loadEventEnd")
            rows = session.execute_script(
                "return window.veracityReport.tables['gamma-items'].rows.length")
            sorts = [session.execute_script(SORT) for _ in range(5)]
        finally:
            session.quit()
    if rows != count:
        sys.exit(f"the report holds {rows} rows, expected {count}")
    sort = statistics.median(sorts)
    print(f"items: {count} items")
    print(f"scoring (fake model, no cache): {scored:.1f} s")
    print(f"report build: {built:.2f} s")
    print(f"report size: {size / 1e6:.2f} MB")
    print(f"open (navigation to load end): {opened:.0f} ms")
    print(f"sort by γ (median of 5): {sort:.0f} ms")
    print(f"open and sort vs 1 s: {(opened + sort) / 1000:.2f} x")


if __name__ == "__main__":
    main()
