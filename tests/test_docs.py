"""``make docs`` builds the site offline (issue 27 §6): the guide, the API reference from the docstrings, the
architecture and benchmark pages and the notebooks, and a failed build keeps the previous site."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parents[1] / "docs" / "build.py"


def _builder():
    spec = importlib.util.spec_from_file_location("docs_build", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_site_has_the_guide_the_api_reference_and_the_notebooks(tmp_path):
    site = tmp_path / "site"
    pages = _builder().build(site)
    names = {page.relative_to(site).as_posix() for page in pages}
    assert {"index.html", "architecture.html", "benchmarks.html", "notebooks/tutorial.html"} <= names
    for module in ("ppl_sparsegp/core/kernels", "ppl_sparsegp/infer/svi", "ppl_sparsegp/models/numpyro/svgp",
                   "ppl_sparsegp/models/numpyro/vgp", "ppl_sparsegp/data"):  # fmt: skip
        assert f"api/{module}.html" in names, module
    assert "Quickstart" in (site / "index.html").read_text()
    svgp = (site / "api/ppl_sparsegp/models/numpyro/svgp.html").read_text()
    assert "uncollapsed sparse variational GP" in svgp and "whiten" in svgp  # the module's and the class's docstrings


def test_a_failed_build_leaves_the_previous_site(tmp_path, monkeypatch):
    builder = _builder()
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("previous")

    def failing(*modules, output_directory):
        raise RuntimeError("pdoc failed")

    monkeypatch.setattr(builder.pdoc, "pdoc", failing)
    with pytest.raises(RuntimeError, match="pdoc failed"):
        builder.build(site)
    assert (site / "index.html").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["site"]  # no staging folder left behind
