"""``fit bsgp --noise-per-output``: BSGPConfig.noise_per_output from the command line, in the checkpoint's
fingerprint and results.json. The recipe is replaced by a recorder, so nothing compiles."""

import json

import jax
import pytest

from ppl_sparsegp.cli import bsgp as cli_bsgp
from ppl_sparsegp.cli import main

TINY = ("--iterations", "2", "--kept", "1", "--inducing", "5", "--no-progress", "--quiet")


class Reached(Exception):
    """Raised by the recorder in place of the recipe."""


@pytest.fixture
def recipe(monkeypatch):
    """The arguments ``fit_bsgp`` was called with (it then raises :class:`Reached`); ``jax.jit`` is a trap."""
    calls = []

    def record(X, y, config, **kwargs):
        calls.append({"config": config, **kwargs})
        raise Reached

    monkeypatch.setattr(cli_bsgp, "fit_bsgp", record)
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled"))
    return calls


def test_the_flag_reaches_the_config_and_the_fingerprint(tmp_path, recipe):
    for extra in ((), ("--noise-per-output",)):
        with pytest.raises(Reached):
            main(["fit", "bsgp", "--data", "diabetes", *TINY, "--noise-variance", "0.3", *extra,
                  "--out", str(tmp_path / f"out{len(extra)}")])  # fmt: skip
    shared, per_output = recipe
    assert shared["config"].noise_per_output is False and per_output["config"].noise_per_output is True
    # the recipe makes the Gaussian with one variance per output, each started at --noise-variance
    assert per_output["likelihood"] is None and per_output["config"].noise_variance == 0.3
    assert shared["likelihood"] is not None and float(shared["likelihood"].variance) == 0.3
    differ = {k for k in shared["fingerprint"] if shared["fingerprint"][k] != per_output["fingerprint"][k]}
    assert differ == {"--noise-per-output"} and per_output["fingerprint"]["--noise-per-output"] is True
    settings = json.loads((tmp_path / "out1" / cli_bsgp.SETTINGS_FILE).read_text())
    assert settings["--noise-per-output"] is True


@pytest.mark.parametrize(
    "args, message",
    [
        (("--data", "breast_cancer", "--noise-per-output"),
         "error: --noise-per-output: the Bernoulli likelihood of binary data (embedded/breast_cancer) has no noise"),
        (("--data", "diabetes", "--likelihood", "studentt", "--noise-per-output"),
         "error: --noise-per-output: one noise variance per output of the Gaussian likelihood; --likelihood studentt"),
    ],
)  # fmt: skip
def test_noise_per_output_is_refused_where_there_is_no_gaussian_noise(tmp_path, capsys, recipe, args, message):
    assert main(["fit", "bsgp", *args, *TINY, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith(message) and not recipe


def test_help_documents_noise_per_output(capsys):
    assert main(["fit", "bsgp", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--noise-per-output" in text and "one noise variance per column" in text
    assert "(default: one noise variance shared by the columns)" in text
