"""`make tensorboard`: the chief's scalars of a real run, served on 127.0.0.1 and read back over
HTTP with requests, as a person's browser would."""

import pytest
import requests
from labtest.cli import lab_env, run_lab
from tflab.backends.local import free_ports
from tflab.engine import docker, labels

EPOCHS = 3


@pytest.fixture(scope="module")
def served(lab):
    run = lab.run("tensorboard", STRATEGY="multiworker", WORKERS=2, EPOCHS=EPOCHS, EXAMPLES=2048)
    assert run.finished.returncode == 0, run.why()
    lab.runs_dir.chmod(0o755)  # pytest keeps its folders to root alone; runs/ is readable, as here
    port = free_ports(1)[0]
    try:
        started = run_lab("tensorboard", env=lab_env(RUNS_DIR=str(lab.runs_dir), TENSORBOARD_PORT=str(port)))
        assert started.returncode == 0, started.output
        yield run, f"http://127.0.0.1:{port}", started.stdout
    finally:
        docker.remove_project(labels.tensorboard_project(lab.runs_dir))


def test_it_says_where_it_serves(served):
    _, url, stdout = served
    # Started as `python -m tflab tensorboard`: the way to stop it is said in that command's words.
    assert stdout.strip().endswith(f"at {url} (127.0.0.1 only; `python3 -m tflab down` stops it)")


def test_it_lists_the_run(served):
    run, url, _ = served
    runs = requests.get(f"{url}/data/runs", timeout=10).json()
    assert f"{run.run_dir.name}/tasks/tensorboard" in runs


def test_it_serves_the_chiefs_loss_per_epoch(served):
    run, url, _ = served
    answer = requests.get(f"{url}/data/plugin/scalars/scalars", timeout=10,
                          params={"run": f"{run.run_dir.name}/tasks/tensorboard", "tag": "loss"})
    assert answer.status_code == 200, answer.text
    points = answer.json()  # [wall_time, step, value] per epoch
    assert [step for _, step, _ in points] == list(range(1, EPOCHS + 1))
    assert [value for _, _, value in points] == pytest.approx(run.losses("worker-0"), rel=1e-6)
    tags = requests.get(f"{url}/data/plugin/scalars/tags", timeout=10).json()[f"{run.run_dir.name}/tasks/tensorboard"]
    assert {"loss", "examples_per_second", "seconds"} <= set(tags)


def test_its_one_published_port_is_on_loopback(served, lab):
    _, url, _ = served
    published = docker.run_quiet(["docker", "ps", "--filter", f"label=com.docker.compose.project="
                                   f"{labels.tensorboard_project(lab.runs_dir)}", "--format",
                                   "{{.Ports}}"]).stdout.split()
    assert published == [f"{url.removeprefix('http://')}->6006/tcp"]
