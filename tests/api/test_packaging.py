"""The installed package holds every subpackage: pyproject.toml lists packages by name (``models/`` is mapped to
``ppl_sparsegp.models``), so a new subpackage missing from the list would be left out of a wheel while an editable
install still finds it."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {name: ROOT / folder for name, folder in config["package-dir"].items()}
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "ppl_sparsegp").rglob("__init__.py")}
    for name, folder in mapped.items():
        on_disk |= {".".join((name, *init.parent.relative_to(folder).parts)) for init in folder.rglob("__init__.py")}
    assert on_disk == listed, f"missing from pyproject: {sorted(on_disk - listed)}; stale: {sorted(listed - on_disk)}"
