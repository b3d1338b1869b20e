"""`make clean` removes what the lab can rebuild and never a run's outputs."""

from tflab import cli, docker, images, swarm
from tflab.settings import Settings


def test_clean_keeps_every_run(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "worker-0.jsonl").write_text("{}\n")
    monkeypatch.setattr(docker, "check", lambda: "20.10")
    # Nothing here may reach the real engine: a real `down` would end every lab run on it
    # (this test once removed a swarm stack an integration test was running).
    monkeypatch.setattr(docker, "lab_projects", lambda scope, tensorboard_project=None: [])
    monkeypatch.setattr(swarm, "lab_stacks", lambda scope: [])
    monkeypatch.setattr(images, "image_id", lambda name: None)
    monkeypatch.setattr(images, "WHEELS", tmp_path / "wheels")
    monkeypatch.setattr(images, "WHEEL_STAMP", tmp_path / "wheels" / ".stamp")
    monkeypatch.setattr(images, "BUILT", tmp_path / "built.json")
    monkeypatch.setattr(images, "GPU_WHEELS", tmp_path / "wheels-gpu")
    monkeypatch.setattr(images, "GPU_WHEEL_STAMP", tmp_path / "wheels-gpu" / ".stamp")
    monkeypatch.setattr(images, "ARM64_WHEELS", tmp_path / "wheels-arm64")
    monkeypatch.setattr(images, "ARM64_WHEEL_STAMP", tmp_path / "wheels-arm64" / ".stamp")
    for wheels in ("wheels", "wheels-gpu", "wheels-arm64"):
        (tmp_path / wheels).mkdir()
        (tmp_path / wheels / "x.whl").write_text("")
        (tmp_path / wheels / "README.md").write_text("kept")
    (tmp_path / "built.json").write_text('{"images": ["tflab-trainer:cpu-0123456789ab"]}')
    assert cli.command_clean(Settings(runs_dir=str(runs))) == 0
    assert (runs / "a" / "worker-0.jsonl").read_text() == "{}\n"
    assert not [wheel for wheel in tmp_path.glob("wheels*/x.whl")]
    assert (tmp_path / "wheels-gpu" / "README.md").exists() and not (tmp_path / "built.json").exists()
    assert f"kept 1 run folder(s) in {runs}" in capsys.readouterr().out
