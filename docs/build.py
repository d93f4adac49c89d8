"""Build the documentation site offline: ``make docs`` writes it to ``docs/_build`` (open ``docs/_build/index.html``).

Pages:

* ``index.html``: the README (the guide), with links to the rest;
* ``architecture.html``, ``scaling.html`` and ``benchmarks.html``: docs/architecture.md, docs/scaling.md and
  benchmarks/README.md;
* ``api/``: the API reference that pdoc generates from the docstrings of ``ppl_sparsegp`` and its models
  (Google-style sections), with a search box;
* ``notebooks/<name>.html``: the notebooks of notebooks/ rendered as stored by nbconvert (tests/test_notebooks.py
  runs them in CI).

Nothing is fetched: pdoc, nbconvert and markdown2 (the ``docs`` extra, part of ``dev``) run on local files. The site
is built in a fresh folder beside ``--out`` and moved into place once complete, so a failed build leaves the
previous site as it was.
"""

from __future__ import annotations

import argparse
import html
import pkgutil
import shutil
import tempfile
import warnings
from pathlib import Path

import markdown2
import nbconvert
import pdoc
import pdoc.render

ROOT = Path(__file__).resolve().parents[1]


def api_modules() -> list[str]:
    """``ppl_sparsegp``, each of its submodules by name and the models: the package's ``__all__`` holds the everyday
    names only, so pdoc, which follows it, would otherwise leave out every submodule but those it names."""
    import ppl_sparsegp

    found = {info.name for info in pkgutil.iter_modules(ppl_sparsegp.__path__)} - set(ppl_sparsegp.__all__)
    return ["ppl_sparsegp", *(f"ppl_sparsegp.{name}" for name in sorted(found)), "ppl_sparsegp.models.numpyro"]


MARKDOWN_PAGES = {"index.html": ROOT / "README.md", "architecture.html": ROOT / "docs" / "architecture.md",
                  "scaling.html": ROOT / "docs" / "scaling.md",
                  "benchmarks.html": ROOT / "benchmarks" / "README.md"}  # fmt: skip
MARKDOWN_EXTRAS = ["fenced-code-blocks", "tables", "header-ids", "code-friendly"]
STYLE = (
    "body{max-width:60rem;margin:2rem auto;padding:0 1rem;font-family:system-ui,sans-serif;line-height:1.5}"
    "pre{background:#f6f8fa;padding:.8rem;overflow-x:auto}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.2rem .5rem}nav a{margin-right:1rem}"
)


def navigation(notebooks: list[str]) -> str:
    """The links at the top of every Markdown page: the guide, the API reference, the other pages, the notebooks."""
    links = [("index.html", "Guide"), ("api/ppl_sparsegp.html", "API reference"),
             ("architecture.html", "Architecture"), ("scaling.html", "Scaling"),
             ("benchmarks.html", "Benchmarks")]  # fmt: skip
    links += [(f"notebooks/{name}.html", f"Notebook: {name}") for name in notebooks]
    return "<nav>" + "".join(f'<a href="{href}">{html.escape(text)}</a>' for href, text in links) + "</nav>"


def markdown_page(source: Path, nav: str) -> str:
    """``source`` (Markdown) as a standalone HTML page under ``nav``."""
    body = markdown2.markdown(source.read_text(), extras=MARKDOWN_EXTRAS)
    title = html.escape(source.read_text().splitlines()[0].lstrip("# "))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{STYLE}</style></head>"
            f"<body>{nav}{body}</body></html>")  # fmt: skip


def build(out: Path) -> list[Path]:
    """Write the site to ``out`` (replacing what was there once the new site is complete); returns its pages."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        pdoc.render.configure(docformat="google", search=True, footer_text="ppl_sparsegp")
        with warnings.catch_warnings():
            # A model's __init__ annotations come from its dataclass base (from __future__ import annotations), and
            # pdoc evaluates them in the subclass's module, where names such as Kernel are not imported: it then
            # shows the annotation as written, which is what it says in these warnings.
            warnings.filterwarnings("ignore", message="Error parsing type annotation", category=UserWarning)
            pdoc.pdoc(*api_modules(), output_directory=staging / "api")
        notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
        exporter = nbconvert.HTMLExporter()
        (staging / "notebooks").mkdir()
        for notebook in notebooks:
            body, _ = exporter.from_filename(str(notebook))
            (staging / "notebooks" / f"{notebook.stem}.html").write_text(body)
        nav = navigation([notebook.stem for notebook in notebooks])
        for name, source in MARKDOWN_PAGES.items():
            (staging / name).write_text(markdown_page(source, nav))
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(out.rglob("*.html"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "_build", help="the site's folder")
    args = parser.parse_args()
    pages = build(args.out)
    print(f"wrote {len(pages)} pages to {args.out}; open {args.out / 'index.html'}")


if __name__ == "__main__":
    main()
