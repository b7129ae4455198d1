"""Where every dataset the loaders read comes from: its public source, licence, files and
checksums, and a fetch that verifies each file before it is kept.

The list lives in ``catalogue.json`` beside this module. Each file is pinned to a commit of a
public repository, so its address names fixed bytes; the SHA-256 (or, where only that is
published, git's blob id) is checked after download all the same, and a file that fails the
check is never moved into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import httpx

from veracity.errors import ConfigError, DataError

RAW_HOST = "https://raw.githubusercontent.com"
"""Where the pinned files live; ``--mirror`` replaces this prefix (an internal mirror)."""


class UnreachableError(DataError):
    """The source could not be reached (no network, a firewall, a mirror that is down)."""


@dataclass(frozen=True)
class DatasetFile:
    """One file of a dataset: where it goes, where it comes from, how it is checked."""

    path: str
    """Relative to the dataset's folder."""
    url: str
    sha256: str = ""
    git_blob: str = ""
    """git's object id of the file (SHA-1 of ``blob <size>\\0`` + bytes), where no SHA-256 is known."""
    size: int | None = None

    def check(self, digest: Digests) -> str | None:
        """Why the downloaded bytes are not this file, or None when they are."""
        if self.size is not None and digest.size != self.size:
            return f"{digest.size:,} bytes, expected {self.size:,}"
        if self.sha256 and digest.sha256 != self.sha256:
            return f"SHA-256 {digest.sha256}, expected {self.sha256}"
        if self.git_blob and digest.git_blob != self.git_blob:
            return f"git blob {digest.git_blob}, expected {self.git_blob}"
        return None


@dataclass(frozen=True)
class Dataset:
    """A dataset in the catalogue."""

    name: str
    title: str
    origin: str
    licence: str
    files: tuple[DatasetFile, ...]
    spec: str
    """How to use it (``--dataset SPEC``), ``{dir}`` standing for the folder it was fetched to;
    empty when no loader reads it."""
    note: str = ""
    manual: str = ""
    """Set when it cannot be fetched by veracity: where a person downloads it."""

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)

    def spec_for(self, folder: Path) -> str:
        return self.spec.replace("{dir}", str(folder))


@dataclass(frozen=True)
class Digests:
    size: int
    sha256: str
    git_blob: str


def _dataset(data: dict[str, object]) -> Dataset:
    files = tuple(DatasetFile(**f) for f in data.pop("files"))  # type: ignore[attr-defined]
    return Dataset(files=files, **data)  # type: ignore[arg-type]


CATALOGUE_ENV = "VERACITY_DATA_CATALOGUE"
"""Names a catalogue file of one's own (same format) read instead of the bundled one: an
internal list whose files, sizes and checksums are those of a private mirror."""


def catalogue() -> tuple[Dataset, ...]:
    """Every dataset the loaders read, in the catalogue's order (``$VERACITY_DATA_CATALOGUE``'s,
    when it names a file)."""
    own = os.environ.get(CATALOGUE_ENV)
    if own:
        try:
            text = Path(own).expanduser().read_text("utf-8")
            return tuple(_dataset(d) for d in json.loads(text)["datasets"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{CATALOGUE_ENV}={own}: not a dataset catalogue "
                              f"({type(exc).__name__}: {exc})") from None
    text = resources.files("veracity.data").joinpath("catalogue.json").read_text("utf-8")
    return tuple(_dataset(d) for d in json.loads(text)["datasets"])


def find(name: str) -> Dataset:
    """The dataset called ``name``; a ConfigError listing the names otherwise."""
    known = catalogue()
    for dataset in known:
        if dataset.name == name:
            return dataset
    raise ConfigError(f"no dataset '{name}' in the catalogue; known: "
                      f"{', '.join(d.name for d in known)}")


def mirrored(url: str, mirror: str | None) -> str:
    """``url`` with the public host replaced by ``mirror``."""
    if not mirror:
        return url
    if not url.startswith(RAW_HOST + "/"):
        raise ConfigError(f"{url}: only files on {RAW_HOST} can be taken from a mirror")
    return mirror.rstrip("/") + url[len(RAW_HOST):]


def _download(client: httpx.Client, url: str, target: Path) -> Digests:
    """Stream ``url`` into ``target``; its digests once it is whole."""
    with client.stream("GET", url) as response:
        if response.status_code != 200:
            raise DataError(f"{url}: HTTP {response.status_code}")
        with target.open("wb") as out:
            for chunk in response.iter_bytes():
                out.write(chunk)
    return digests(target)


def fetch(dataset: Dataset, folder: Path, mirror: str | None = None,
          client: httpx.Client | None = None,
          progress: Callable[[DatasetFile, str], None] | None = None) -> Iterator[DatasetFile]:
    """Download ``dataset`` into ``folder`` file by file, each checked before it is renamed
    into place; a file already there with the right checksum is kept without a download.
    Yields each file once it is in place."""
    if dataset.manual:
        raise ConfigError(f"{dataset.name} cannot be fetched by veracity: {dataset.manual}")
    own = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(30.0, read=120.0), follow_redirects=True)
    try:
        for file in dataset.files:
            target = folder / file.path
            if target.is_file() and file.check(digests(target)) is None:
                if progress:
                    progress(file, "present")
                yield file
                continue
            url = mirrored(file.url, mirror)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part",
                                            dir=target.parent)
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                try:
                    got = _download(http, url, tmp)
                except httpx.TransportError as exc:
                    raise UnreachableError(f"{url}: {type(exc).__name__}: {exc}") from None
                except httpx.HTTPError as exc:
                    raise DataError(f"{url}: {type(exc).__name__}: {exc}") from None
                problem = file.check(got)
                if problem:
                    raise DataError(f"{url}: checksum mismatch ({problem}); the file was not kept")
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            if progress:
                progress(file, "fetched")
            yield file
    finally:
        if own:
            http.close()


def digests(path: Path) -> Digests:
    """Size, SHA-256 and git blob id of a file on disk."""
    size = path.stat().st_size
    sha, blob = hashlib.sha256(), hashlib.sha1(f"blob {size}\0".encode())
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
            blob.update(block)
    return Digests(size, sha.hexdigest(), blob.hexdigest())


def offline_help(dataset: Dataset, folder: Path) -> str:
    """What to download by hand, and where to put it, when the network does not allow a fetch."""
    lines = [f"download by hand into {folder}:"]
    lines += [f"  {f.url}  ->  {folder / f.path}" for f in dataset.files[:5]]
    if len(dataset.files) > 5:
        lines.append(f"  ... and {len(dataset.files) - 5} more files (veracity data show "
                     f"{dataset.name} lists them all)")
    if dataset.spec:
        lines.append(f"then use {dataset.spec_for(folder)}")
    return "\n".join(lines)


__all__ = ["CATALOGUE_ENV", "Dataset", "DatasetFile", "Digests", "catalogue", "digests", "fetch",
           "find", "mirrored", "offline_help", "UnreachableError"]
