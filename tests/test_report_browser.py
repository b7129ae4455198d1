"""Reports opened in headless Chromium: sorting, filtering, drill-down, comparison, exports,
and a payload corpus that must execute nothing. Skips without chromium + chromium-driver."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from report_runs import PAYLOADS, deception_runs, fewl_runs, gamma_runs, other_runs
from veracity.cache import Cache
from veracity.report import build_report
from veracity.runs.common import Context
from veracity.types import Item

pytestmark = pytest.mark.browser

TITLE = "veracity report"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,900")


def chromium_paths() -> tuple[str, str]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("needs Debian's chromium and chromium-driver")
    return chromium, driver


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, downloads: Path) -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium, driver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(options=options,
                               service=webdriver.ChromeService(executable_path=driver))
    yield session
    session.quit()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Path]]]:
    root = tmp_path_factory.mktemp("runs")
    cache = Cache(root / "cache.sqlite")
    ctx = Context(cache=cache)
    found = {"gamma": gamma_runs(root, ctx), "deception": deception_runs(root, ctx),
             "fewl": fewl_runs(root, ctx), "other": other_runs(root, ctx)}
    ctx.close()
    cache.close()
    yield found


def open_report(browser: Any, paths: list[Path], out: Path) -> None:
    build_report(paths, out, TITLE)
    browser.get(out.as_uri())
    browser.get_log("browser")  # start each page with an empty console


def console_errors(browser: Any) -> list[dict[str, Any]]:
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, selector))


def column(browser: Any, table: str, index: int) -> list[str]:
    rows = css(browser, f"div.vtable[data-src='{table}'] table.items tbody tr.item")
    return [r.find_elements("css selector", "td")[index].text for r in rows]


def header(browser: Any, table: str, key: str) -> Any:
    return css(browser, f"div.vtable[data-src='{table}'] th[data-key='{key}']")[0]


def text_of(browser: Any, element: Any) -> str:
    return str(browser.execute_script("return arguments[0].innerText", element))


def numbers(texts: list[str]) -> list[float]:
    return [float(t) for t in texts if t != "—"]


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def fits_1280(browser: Any) -> bool:
    return bool(browser.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth"))


def test_gamma_report_sorts_filters_drills_and_compares(
    browser: Any, runs: dict[str, list[Path]], tmp_path: Path
) -> None:
    open_report(browser, runs["gamma"], tmp_path / "gamma.html")
    keys = [th.get_attribute("data-key") for th in
            css(browser, "div.vtable[data-src='gamma-items'] th")]
    g = keys.index("gamma")
    assert len(column(browser, "gamma-items", 0)) == 24  # 12 items x 2 runs on one page

    header(browser, "gamma-items", "gamma").click()
    ascending = numbers(column(browser, "gamma-items", g))
    assert ascending == sorted(ascending) and ascending[0] == 0.0  # the stable model's zeros
    header(browser, "gamma-items", "gamma").click()
    descending = numbers(column(browser, "gamma-items", g))
    assert descending == sorted(ascending, reverse=True) and descending != ascending

    search = css(browser, "div.vtable[data-src='gamma-items'] input[type=search]")[0]
    search.send_keys("capital")
    prompts = column(browser, "gamma-items", keys.index("prompt"))
    assert 0 < len(prompts) < 24 and all("capital" in p.lower() for p in prompts)
    search.clear()
    search.send_keys(" ")  # input event with an empty needle: every row again
    low = css(browser, "div.vtable[data-src='gamma-items'] input.range")[0]
    low.send_keys("0.01")
    assert all(v >= 0.01 for v in numbers(column(browser, "gamma-items", g)))
    assert len(column(browser, "gamma-items", 0)) == 12  # only the unstable model's answers
    low.clear()
    low.send_keys("\b")

    css(browser, "div.vtable[data-src='gamma-items'] tr.item")[0].click()
    detail = css(browser, "div.vtable[data-src='gamma-items'] tr.detail")
    assert len(detail) == 1
    text = text_of(browser, detail[0])
    assert "cosine to original" in text and "hash/256" in text and "ascii-control" in text
    assert css(browser, "tr.detail mark.pert span.tok")  # control characters made visible
    assert css(browser, "tr.detail span.del") and css(browser, "tr.detail span.ins")

    canvas = css(browser, "div.vcompare canvas")[0]
    note = css(browser, "div.vcompare p.muted")[0].text
    assert note.startswith("12 items scored in both runs")
    points = browser.execute_script(
        "var c = document.querySelector('div.vcompare canvas'); var r = c.getBoundingClientRect();"
        "return window.veracityReport.views.vcompare[0].points.map(function (p) {"
        "  return [p[0] * r.width / c.width, p[1] * r.height / c.height]; });")
    x, y = points[0]
    from selenium.webdriver.common.action_chains import ActionChains

    width, height = canvas.size["width"], canvas.size["height"]
    ActionChains(browser).move_to_element_with_offset(
        canvas, int(x - width / 2), int(y - height / 2)).click().perform()
    sides = css(browser, "div.vcompare div.side > div.block")
    assert len(sides) == 2 and sides[0].text.startswith("A: ") and sides[1].text.startswith("B: ")
    worst = css(browser, "div.vcompare table.items tbody tr")
    assert len(worst) == 10  # a page of the most-disagreeing items

    assert fits_1280(browser)
    assert console_errors(browser) == []
    browser.save_screenshot(str(tmp_path / "gamma.png"))
    assert (tmp_path / "gamma.png").stat().st_size > 10_000


def test_deception_report_items_and_side_by_side(
    browser: Any, runs: dict[str, list[Path]], tmp_path: Path
) -> None:
    open_report(browser, runs["deception"], tmp_path / "deception.html")
    subjects = css(browser, "div.vtable[data-src='deception-subjects'] tbody tr")
    assert len(subjects) == 2
    groups = [th.text for th in css(browser, "div.vtable[data-src='deception-subjects'] tr.groups th")]
    assert groups == ["", "fake/deceive", "fake/deceive-flaky"]

    select = css(browser, "div.vtable[data-src='deception-items'] select[data-key='subject']")[0]
    from selenium.webdriver.support.ui import Select

    Select(select).select_by_visible_text("virology")
    keys = [th.get_attribute("data-key") for th in
            css(browser, "div.vtable[data-src='deception-items'] th")]
    shown = column(browser, "deception-items", keys.index("subject"))
    assert shown == ["virology"] * 8

    css(browser, "div.vtable[data-src='deception-items'] tr.item")[0].click()
    text = text_of(browser, css(browser, "tr.detail")[0])
    assert "misleading opening" in text and "normal reasoning" in text
    assert "misleading reasoning" in text and "gold" in text
    assert css(browser, "tr.detail span.ins")  # the misleading opening differs from the normal one
    assert fits_1280(browser)
    assert console_errors(browser) == []
    browser.save_screenshot(str(tmp_path / "deception.png"))


def test_fewl_report_ranks_and_drill_down(
    browser: Any, runs: dict[str, list[Path]], tmp_path: Path
) -> None:
    open_report(browser, runs["fewl"], tmp_path / "fewl.html")
    ranks = css(browser, "div.vtable[data-src='fewl-ranks'] tbody tr")
    assert len(ranks) == 2
    assert ranks[0].text.split()[0] == "fake/stable"  # ranked first by mean FEWL
    rows = css(browser, "div.vtable[data-src='fewl-items'] tr.item")
    assert len(rows) == 12  # 6 questions x 2 answer sources
    rows[0].click()
    text = text_of(browser, css(browser, "tr.detail")[0])
    for part in ("references (λ: weight, s: expertise)", "penalty neighbours",
                 "every scored answer to this question", "fake/pairs#0"):
        assert part in text
    assert len(css(browser, "tr.detail details table tbody tr")) == 3  # the fake writes R - 1 pairs
    assert fits_1280(browser)
    assert console_errors(browser) == []
    browser.save_screenshot(str(tmp_path / "fewl.png"))


def test_attack_and_isotropy_reports(
    browser: Any, runs: dict[str, list[Path]], tmp_path: Path
) -> None:
    open_report(browser, runs["other"], tmp_path / "other.html")
    keys = [th.get_attribute("data-key") for th in
            css(browser, "div.vtable[data-src='isotropy-items'] th")]
    header(browser, "isotropy-items", "answer_angle").click()
    header(browser, "isotropy-items", "answer_angle").click()
    angles = numbers(column(browser, "isotropy-items", keys.index("answer_angle")))
    assert len(angles) == 8 and angles == sorted(angles, reverse=True)
    assert len(css(browser, "figure.plot img")) >= 2  # the trajectory and the angle histograms
    assert fits_1280(browser)
    assert console_errors(browser) == []
    browser.save_screenshot(str(tmp_path / "attack-isotropy.png"))


def test_csv_and_png_exports_download(
    browser: Any, runs: dict[str, list[Path]], tmp_path: Path, downloads: Path
) -> None:
    open_report(browser, runs["gamma"][:1], tmp_path / "one.html")
    search = css(browser, "div.vtable[data-src='gamma-items'] input[type=search]")[0]
    search.send_keys("capital")
    visible = len(column(browser, "gamma-items", 0))
    css(browser, "div.vtable[data-src='gamma-items'] button.csv")[0].click()
    target = downloads / "gamma-items.csv"
    assert wait_for(target.is_file)
    lines = target.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith('"id","prompt","answer","γ"') and len(lines) == visible + 1
    css(browser, "figure.plot button.png")[0].click()
    png = downloads / "gamma-histograms.png"
    assert wait_for(png.is_file)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert console_errors(browser) == []


def test_payload_corpus_executes_nothing(
    browser: Any, tmp_path: Path, downloads: Path
) -> None:
    cache = Cache(tmp_path / "cache.sqlite")
    ctx = Context(cache=cache)
    questions = [Item(f"p{i}", f"{p} What is {i} + {i}?") for i, p in enumerate(PAYLOADS)]
    paths = gamma_runs(tmp_path, ctx, questions, models=("fake/echo", "fake/unstable"))
    paths += deception_runs(tmp_path, ctx, prefix=PAYLOADS[1] + PAYLOADS[0])
    paths += fewl_runs(tmp_path, ctx, questions, source_names=(PAYLOADS[0], PAYLOADS[2]))
    ctx.close()
    cache.close()
    open_report(browser, paths, tmp_path / "payloads.html")

    for table in ("gamma-items", "deception-items", "fewl-items"):
        for index in range(3):  # drill-downs render the payloads too
            css(browser, f"div.vtable[data-src='{table}'] tr.item")[index].click()
            assert css(browser, f"div.vtable[data-src='{table}'] tr.detail")
    assert browser.title == TITLE
    assert browser.execute_script("return document.querySelectorAll('iframe, svg').length") == 0
    assert browser.execute_script(
        "return Array.from(document.images).every(function (i) {"
        "  return i.src.indexOf('data:image/png;base64,') === 0; })")
    page_text = text_of(browser, css(browser, "body")[0])
    assert "document.title='pwned-1'" in page_text  # shown as text, not run
    csv = browser.execute_script("return window.veracityReport.tables['gamma-items'].csv()")
    assert "\"'=HYPERLINK(" in csv and "\n=" not in csv and ",=" not in csv
    assert console_errors(browser) == []
    browser.save_screenshot(str(tmp_path / "payloads.png"))


def test_deception_case_studies_pick_two_runs_and_filter(browser: Any, tmp_path: Path) -> None:
    """Appendix D: any two runs on the same questions, filtered by subject, both answers side
    by side (the three hand-made runs of tests/fixtures/deception_compare)."""
    from selenium.webdriver.support.ui import Select

    fixtures = Path(__file__).parent / "fixtures" / "deception_compare"
    open_report(browser, [fixtures / n for n in ("alpha", "beta", "gamma")], tmp_path / "d.html")
    root = "div.vcases"
    note = css(browser, f"{root} > p.muted")[0]
    assert note.text == ("10 questions answered by both; A resists where B is misled on 1, "
                         "B resists where A is misled on 1.")
    contrasts = [r.find_elements("css selector", "td")[5].text
                 for r in css(browser, f"{root} tr.item")]
    assert contrasts.count("same group") == 4 and len(contrasts) == 10
    Select(css(browser, f"{root} > div.filters select")[1]).select_by_index(2)  # B = gamma
    assert css(browser, f"{root} > p.muted")[0].text.endswith(
        "A resists where B is misled on 0, B resists where A is misled on 1.")
    Select(css(browser, f"{root} select[data-key='subject']")[0]).select_by_visible_text("biology")
    rows = css(browser, f"{root} tr.item")
    assert len(rows) == 5
    rows[0].click()
    text = text_of(browser, css(browser, f"{root} tr.detail")[0])
    assert "A: alpha-7b (recorded)" in text and "B: gamma-13b" in text  # gamma is a live run
    assert text.count("misleading opening") == 2
    assert fits_1280(browser)
    assert console_errors(browser) == []


def test_sidecar_report_pages_filters_sorts_and_searches(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import random

    from veracity.methods.gamma.run import run_gamma_recorded
    from veracity.report import sidecar

    rng = random.Random(5)
    words = ("the", "answer", "is", "paris", "blue", "seven", "river", "not", "known")
    recorded = tmp_path / "rec.jsonl"
    with recorded.open("w", encoding="utf-8") as fh:
        for i in range(130):
            answer = "" if i % 29 == 3 else " ".join(rng.choice(words) for _ in range(5))
            others = [answer if rng.random() < 0.4 else " ".join(rng.choice(words) for _ in range(4))
                      for _ in range(3)]
            fh.write(json.dumps({"id": f"r{i}", "prompt": f"question {i} (case {i})",
                                 "answer": answer, "perturbed_answers": others}) + "\n")
    with Context(cache=None) as ctx:
        run_gamma_recorded(recorded, "hash/default", ctx, out=tmp_path / "run")
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").open()]
    scored = sorted((s["gamma"] for s in samples if s["gamma"] is not None), reverse=True)
    monkeypatch.setattr(sidecar, "SIDECAR_THRESHOLD", 50)
    monkeypatch.setattr(sidecar, "CHUNK_ROWS", 20)
    open_report(browser, [tmp_path / "run"], tmp_path / "run" / "report.html")
    root = "div.vpaged[data-src='gamma-all']"

    def renders() -> int:
        return int(css(browser, root)[0].get_attribute("data-renders") or 0)

    def settle(before: int) -> None:
        assert wait_for(lambda: renders() > before)
        time.sleep(0.2)  # a later render (the second bound of a range) may follow

    assert wait_for(lambda: renders() >= 1)
    keys = [th.get_attribute("data-key") for th in css(browser, f"{root} th")]
    g = keys.index("gamma")

    def shown() -> list[Any]:
        return [r.find_elements("css selector", "td") for r in css(browser, f"{root} tr.item")]

    first = numbers([cells[g].text for cells in shown()])
    assert first == [round(v, 3) for v in scored[:50]]  # worst γ first, one page
    loaded = browser.execute_script(
        "return Object.keys(window.veracityReport.paged['gamma-all'].loaded).length")
    assert loaded < 7  # 130 rows in 7 files: only those of the first page were loaded
    assert css(browser, f"{root} span.count")[0].text == "130 of 130 rows"
    before = renders()
    [b for b in css(browser, f"{root} div.pager button") if "next" in b.text][0].click()
    settle(before)
    assert numbers([cells[g].text for cells in shown()]) == [round(v, 3) for v in scored[50:100]]

    low, high = css(browser, f"{root} input.range")
    before = renders()
    low.send_keys("0.2")
    high.send_keys("0.6")
    settle(before)
    inside = [v for v in scored if 0.2 <= v <= 0.6]
    assert css(browser, f"{root} span.count")[0].text == f"{len(inside)} of 130 rows"
    values = numbers([cells[g].text for cells in shown()])
    assert values == [round(v, 3) for v in inside[:50]] and 0 < len(values)
    before = renders()
    css(browser, f"{root} th[data-key='gamma']")[0].click()
    settle(before)
    assert numbers([cells[g].text for cells in shown()]) == [round(v, 3) for v in sorted(inside)[:50]]

    low.clear()
    high.clear()
    low.send_keys("\b")
    before = renders()
    search = css(browser, f"{root} input[type=search]")[0]
    search.send_keys("case 7\n")
    settle(before)
    prompts = [cells[keys.index("prompt")].text for cells in shown()]
    assert sorted(prompts) == sorted(f"question {i} (case {i})" for i in range(130)
                                     if "case 7" in f"question {i} (case {i})")
    css(browser, f"{root} tr.item")[0].click()
    assert wait_for(lambda: bool(css(browser, f"{root} tr.detail")))
    assert "cosine to original" in text_of(browser, css(browser, f"{root} tr.detail")[0])
    why = css(browser, "div.vtable[data-src='gamma-items'] th[data-key='shown']")
    assert why and "worst" in css(browser, "div.vtable[data-src='gamma-items'] tbody")[0].text
    assert console_errors(browser) == []
