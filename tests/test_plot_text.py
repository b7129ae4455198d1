"""User text drawn in plots (subject names, labels) is made harmless before matplotlib sees it."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from veracity.report.html import figure, make_text_harmless  # noqa: E402


def test_control_characters_in_labels_are_spelled_out_and_warn_nothing_raw() -> None:
    fig, ax = plt.subplots()
    ax.barh([0, 1], [1, 2])
    ax.set_yticks([0, 1], ["plain", "evil\x1b[31m subject"])
    ax.set_title("title \x07 with a bell")
    ax.plot([0, 1], [0, 1], label="line \u202e reversed")
    ax.legend()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        html = figure(fig, "a plot")
    raw = [str(w.message) for w in caught if any(c in str(w.message) for c in "\x1b\x07\u202e")]
    assert raw == []
    assert html.startswith("<figure class='plot'><img alt=\"a plot\"")


def test_the_figure_keeps_the_text_readable() -> None:
    fig, ax = plt.subplots()
    ax.set_xticks([0], ["a\x1bb"])
    ax.set_xlabel("x\x00y")
    make_text_harmless(fig)
    assert ax.get_xlabel() == "x\\x00y"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a\\x1bb"]
    plt.close(fig)
