"""`make clean` removes what the lab can rebuild and never a run's outputs."""

from tflab import cli, compose, images
from tflab.settings import Settings


def test_clean_keeps_every_run(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "worker-0.jsonl").write_text("{}\n")
    monkeypatch.setattr(compose, "check_docker", lambda: "20.10")
    monkeypatch.setattr(compose, "lab_projects", lambda: [])
    monkeypatch.setattr(images, "image_id", lambda name: None)
    monkeypatch.setattr(images, "WHEELS", tmp_path / "wheels")
    monkeypatch.setattr(images, "WHEEL_STAMP", tmp_path / "wheels" / ".stamp")
    monkeypatch.setattr(images, "BUILT", tmp_path / "built.json")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "x.whl").write_text("")
    assert cli.command_clean(Settings(runs_dir=str(runs))) == 0
    assert (runs / "a" / "worker-0.jsonl").read_text() == "{}\n"
    assert not (tmp_path / "wheels" / "x.whl").exists()
    assert f"kept 1 run folder(s) in {runs}" in capsys.readouterr().out
