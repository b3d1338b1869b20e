"""An installed lab names its cache folder at import and makes it only when a command needs the
lab's files: with a HOME it cannot write, `--help` and the readers work, and a command that needs
the files is one line naming the folder and the variable that chooses another."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from labtest.cli import REPO
from tflab import cli, home


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """home.py as an installed lab has it: bundled files, LAB_HOME in a cache folder not yet made."""
    bundled = tmp_path / "site/tflab/_lab"
    for name in home.LAB_FILES:
        (bundled / name).parent.mkdir(parents=True, exist_ok=True)
        (bundled / name).write_text(f"{name}\n")
    monkeypatch.setattr(home, "BUNDLED", bundled)
    return tmp_path


def test_the_cache_folder_is_named_at_import_and_made_on_first_need(installed, monkeypatch):
    monkeypatch.setenv("TFLAB_HOME", str(installed / "cache"))
    monkeypatch.setattr(home, "LAB_HOME", home.installed_path())
    assert not (installed / "cache").exists()  # naming it made nothing
    assert home.ensure() == home.LAB_HOME and (home.LAB_HOME / "docker-compose.yml").is_file()


def test_a_cache_folder_that_cannot_be_made_is_one_line_naming_it(installed, monkeypatch, capsys):
    blocker = installed / "a-file"  # under a file, no folder can be made, by root either
    blocker.write_text("")
    monkeypatch.setenv("TFLAB_HOME", str(blocker / "cache"))
    monkeypatch.setattr(home, "LAB_HOME", home.installed_path())
    assert cli.main(["images"]) == cli.USAGE_ERROR
    err = capsys.readouterr().err
    assert err.splitlines() == [f"tflab: cannot make the lab's cache folder {blocker / 'cache'} (Not a directory); "
                                "set TFLAB_HOME to a folder you can write (else XDG_CACHE_HOME/tflab, else "
                                "~/.cache/tflab is used)"]


def test_no_known_home_is_one_line_too(installed, monkeypatch, capsys):
    monkeypatch.delenv("TFLAB_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    monkeypatch.setattr(home, "LAB_HOME", home.installed_path())
    assert cli.main(["wheels"]) == cli.USAGE_ERROR
    assert capsys.readouterr().err.startswith("tflab: no home folder is known for the lab's cache (HOME is unset); "
                                              "set TFLAB_HOME")


def test_reading_commands_never_need_the_cache(installed, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TFLAB_HOME", "/proc/no-such-place/cache")
    monkeypatch.setattr(home, "LAB_HOME", home.installed_path())
    assert cli.main(["settings"]) == 0
    assert cli.main(["summary", f"RUNS_DIR={tmp_path / 'runs'}"]) == cli.USAGE_ERROR
    assert "no runs yet" in capsys.readouterr().err


def test_help_works_with_a_home_that_cannot_be_written(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("TFLAB_HOME", "XDG_CACHE_HOME")}
    env.update(HOME="/proc/no-such-home", PYTHONPATH=str(REPO / "scripts"))
    result = subprocess.run([sys.executable, "-m", "tflab", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "usage: tflab" in result.stdout, result.stderr
