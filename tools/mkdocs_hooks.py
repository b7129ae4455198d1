"""MkDocs hooks: the site's home page is README.md and its changelog CHANGELOG.md, generated at
build time with their links rewritten for the site, so neither text is kept twice."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    readme = readme.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")
    files.append(File.generated(config, "index.md", content=readme))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "changelog.md", content=changelog))
    return files
