"""``veracity data``: the catalogue is complete and consistent, and ``data get`` fetches from a
real HTTP server on 127.0.0.1 (standing in for the public host), verifies every checksum and
never keeps a file that fails it."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main
from veracity.data.catalogue import RAW_HOST, Dataset, DatasetFile, catalogue, fetch, find
from veracity.errors import ConfigError, DataError


class Files:
    """What the local server serves: path -> bytes; every request is counted."""

    def __init__(self) -> None:
        self.content: dict[str, bytes] = {}
        self.requests: list[str] = []


@pytest.fixture
def mirror() -> Iterator[tuple[str, Files]]:
    files = Files()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            files.requests.append(self.path)
            body = files.content.get(self.path)
            if body is None:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", files
    server.shutdown()
    server.server_close()


def _served_path(url: str) -> str:
    return url[len(RAW_HOST):]


def test_the_catalogue_names_every_loader_kind_with_source_licence_and_checksums() -> None:
    datasets = {d.name: d for d in catalogue()}
    for name in ("truthfulqa", "webquestions", "db-mmlu", "db-mmlu-results", "chale", "halueval",
                 "haltt4llm", "mmlu", "progqa"):
        assert name in datasets, name
    for d in datasets.values():
        assert d.origin and d.licence and d.title
        if d.manual:
            assert not d.files
            continue
        assert d.files
        for f in d.files:
            assert f.url.startswith(RAW_HOST + "/")
            # pinned to a commit: the address names fixed bytes
            assert any(len(part) == 40 for part in f.url.split("/"))
            assert len(f.sha256) == 64 or len(f.git_blob) == 40
    assert len(datasets["db-mmlu"].files) == 57
    assert len(datasets["mmlu"].files) == 57 * 2
    assert datasets["db-mmlu"].spec_for(Path("d")) == "--dataset db-mmlu:d"


def test_fetch_verifies_and_keeps_a_file_already_in_place(tmp_path: Path,
                                                         mirror: tuple[str, Files]) -> None:
    base, files = mirror
    body = b"Type,Category,Question\n"
    url = f"{RAW_HOST}/owner/repo/{'a' * 40}/q.csv"
    files.content[_served_path(url)] = body
    good = Dataset("tiny", "t", "o", "MIT",
                   (DatasetFile("sub/q.csv", url, sha256=hashlib.sha256(body).hexdigest(),
                                size=len(body)),), "--dataset csv:{dir}/sub/q.csv")
    assert [f.path for f in fetch(good, tmp_path / "d", base)] == ["sub/q.csv"]
    assert (tmp_path / "d" / "sub" / "q.csv").read_bytes() == body
    assert len(files.requests) == 1
    list(fetch(good, tmp_path / "d", base))  # already there and right: no second download
    assert len(files.requests) == 1
    # git's blob id checks a file just as well
    blob = hashlib.sha1(f"blob {len(body)}\0".encode() + body).hexdigest()
    by_blob = Dataset("tiny", "t", "o", "MIT", (DatasetFile("q.csv", url, git_blob=blob),), "")
    list(fetch(by_blob, tmp_path / "e", base))
    assert (tmp_path / "e" / "q.csv").read_bytes() == body


def test_a_wrong_checksum_is_refused_and_nothing_is_kept(tmp_path: Path,
                                                         mirror: tuple[str, Files]) -> None:
    base, files = mirror
    chale = find("chale")
    files.content[_served_path(chale.files[0].url)] = b'{"Question": ["tampered"]}'
    result = CliRunner().invoke(main, ["data", "get", "chale", "--to", str(tmp_path / "c"),
                                       "--mirror", base])
    assert result.exit_code == 1
    assert "checksum mismatch" in result.output and "not kept" in result.output
    assert not any(p.is_file() for p in (tmp_path / "c").rglob("*"))


def test_an_unreachable_source_says_what_to_download_by_hand(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["data", "get", "webquestions", "--to", str(tmp_path / "w"),
                                       "--mirror", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "download by hand" in result.output
    assert "https://raw.githubusercontent.com/brmson/dataset-factoid-webquestions/" in result.output
    assert f"--dataset webquestions:{tmp_path / 'w'}/test.json" in result.output


def test_datasets_that_need_a_person_say_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Kaggle|kaggle"):
        list(fetch(find("progqa"), tmp_path))
    result = CliRunner().invoke(main, ["data", "show", "db-mmlu-results"])
    assert result.exit_code == 0 and "Test%20Results" in result.output


def test_listing_and_show() -> None:
    listing = CliRunner().invoke(main, ["data"])
    assert listing.exit_code == 0
    assert "truthfulqa" in listing.output and "CC BY-NC 4.0" in listing.output
    shown = CliRunner().invoke(main, ["data", "show", "truthfulqa"])
    assert "Apache-2.0" in shown.output and "sha256 " in shown.output
    unknown = CliRunner().invoke(main, ["data", "show", "nope"])
    assert unknown.exit_code == 1 and "known:" in unknown.output


def test_the_catalogue_matches_the_full_datasets(tmp_path: Path, data_dir: Path,
                                                 mirror: tuple[str, Files]) -> None:
    """Served from the copies beside the repository, each fetchable small dataset verifies: the
    checksums in the catalogue are those of the published files."""
    base, files = mirror
    local = {"truthfulqa": data_dir / "truthfulqa", "chale": data_dir / "chale",
             "webquestions": data_dir / "webquestions" / "main"}
    for name, folder in local.items():
        for f in find(name).files:
            files.content[_served_path(f.url)] = (folder / f.path).read_bytes()
        result = CliRunner().invoke(main, ["data", "get", name, "--to", str(tmp_path / name),
                                           "--mirror", base])
        assert result.exit_code == 0, result.output
        assert "verified" in result.output


def test_a_dataset_fetched_is_read_by_its_loader(tmp_path: Path, mirror: tuple[str, Files]) -> None:
    """The printed spec works: fixture bytes served under a catalogue-shaped entry load."""
    from veracity.data.qa import load_items

    base, files = mirror
    body = b"question,answer\nWhat is 2+2?,4\n"
    url = f"{RAW_HOST}/o/r/{'b' * 40}/qa.csv"
    files.content[_served_path(url)] = body
    d = Dataset("qa", "t", "o", "MIT", (DatasetFile("qa.csv", url,
                                                     sha256=hashlib.sha256(body).hexdigest()),),
                "--dataset csv:{dir}/qa.csv")
    list(fetch(d, tmp_path, base))
    items = load_items(d.spec_for(tmp_path).removeprefix("--dataset "))
    assert [i.question for i in items] == ["What is 2+2?"]
    with pytest.raises(DataError):
        list(fetch(Dataset("x", "t", "o", "MIT", (DatasetFile("y", f"{RAW_HOST}/o/r/{'c' * 40}/y"),),
                           ""), tmp_path, base))


def test_a_catalogue_of_ones_own_replaces_the_bundled_one(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "catalogue.json"
    own.write_text('{"version": 1, "datasets": [{"name": "ours", "title": "t", "origin": "o", '
                   '"licence": "MIT", "files": [], "spec": "", "manual": "ask the data team"}]}',
                   encoding="utf-8")
    monkeypatch.setenv("VERACITY_DATA_CATALOGUE", str(own))
    assert [d.name for d in catalogue()] == ["ours"]
    shown = CliRunner().invoke(main, ["data", "show", "ours"])
    assert shown.exit_code == 0 and "ask the data team" in shown.output
    own.write_text("[]", encoding="utf-8")
    for args in (["data"], ["data", "list"], ["data", "get", "ours"]):
        broken = CliRunner().invoke(main, args)
        assert broken.exit_code == 1 and "VERACITY_DATA_CATALOGUE" in broken.output, args
        assert "not a dataset catalogue" in broken.output
