"""docker.Changes: a run's states are read again only after the engine reported a change, or after
RECHECK_SECONDS, or once its event stream is gone; and ComposeStack.exit_codes reads through it.
The engine is a stand-in `docker` on PATH that prints an event each time the test lets it."""

import time
from pathlib import Path

import pytest
from labtest.fakes import docker_on_path
from tflab.backends import compose
from tflab.core.cluster import build
from tflab.core.settings import Settings
from tflab.engine import docker

# Appends its arguments to argv, a line per call, then prints one action for each numbered file
# the test creates: 1, 2, ... and ends at its --until, as docker does, or when it finds a file
# named `end`.
FAKE_DOCKER = """#!/bin/sh
echo "$@" >> "{folder}/argv"
n=1
until=${{5%.*}}
while [ ! -e "{folder}/end" ] && [ "$(date +%s)" -lt "$until" ]; do
    if [ -e "{folder}/$n" ]; then echo die; n=$((n + 1)); fi
    sleep 0.02
done
"""


@pytest.fixture
def engine(tmp_path, monkeypatch):
    docker_on_path(tmp_path, FAKE_DOCKER.format(folder=tmp_path), monkeypatch)
    return tmp_path


def eventually(condition, seconds=5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_only_a_reported_event_makes_it_read_again(engine):
    changes = docker.Changes("com.docker.compose.project=p")
    try:
        assert changes.since_last_asked()  # nothing read yet
        assert eventually(lambda: (engine / "argv").exists())
        argv = (engine / "argv").read_text().split()
        assert argv[:2] == ["events", "--since"] and float(argv[2]) <= time.time()
        assert argv[3:5] == ["--until", f"{float(argv[2]) + docker.Changes.SPAN_SECONDS:.3f}"]
        assert argv[5:] == ["--filter", "type=container", "--filter", "label=com.docker.compose.project=p",
                            "--format", "{{.Action}}"]
        time.sleep(0.2)
        assert not changes.since_last_asked()  # nothing happened
        (engine / "1").touch()
        assert eventually(changes.since_last_asked)
        assert not changes.since_last_asked()  # counted as read
        changes.report()  # the lab's own action
        assert changes.since_last_asked() and not changes.since_last_asked()
    finally:
        changes.close()


def test_it_reads_again_after_recheck_seconds_and_once_the_stream_is_gone(engine, monkeypatch):
    monkeypatch.setattr(docker.Changes, "RECHECK_SECONDS", 0.3)
    changes = docker.Changes("a=b")
    try:
        assert changes.since_last_asked() and not changes.since_last_asked()
        time.sleep(0.4)
        assert changes.since_last_asked()  # nothing reported, but it has been long enough
        (engine / "end").touch()
        assert eventually(lambda: changes.process is None)
        assert changes.since_last_asked() and changes.since_last_asked()  # every time, as without it
    finally:
        changes.close()


def test_the_stream_comes_in_spans_each_starting_where_the_last_ended(engine, monkeypatch):
    """So that a lab killed outright (no close()) leaves no `docker events` running for longer than a span."""
    monkeypatch.setattr(docker.Changes, "SPAN_SECONDS", 2.0)
    changes = docker.Changes("a=b")
    try:
        argv = engine / "argv"  # the stand-in writes it once started
        assert eventually(lambda: argv.exists() and len(argv.read_text().splitlines()) >= 2, seconds=6.0)
        first, second = (line.split() for line in argv.read_text().splitlines()[:2])
        assert second[2] == first[4]  # --since of the second is --until of the first
        assert changes.process is not None and changes.since_last_asked() and not changes.since_last_asked()
        (engine / "1").touch()
        assert eventually(changes.since_last_asked)  # the second span's event
    finally:
        changes.close()
    assert changes.process is None


def test_without_docker_every_ask_reads(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    changes = docker.Changes("a=b")
    assert changes.process is None
    assert changes.since_last_asked() and changes.since_last_asked()
    changes.close()


class FakeChanges:
    def __init__(self):
        self.due = True

    def since_last_asked(self):
        due, self.due = self.due, False
        return due

    def report(self):
        self.due = True


def test_exit_codes_read_the_engine_only_after_a_change(monkeypatch, tmp_path):
    settings = Settings(workers=2)
    stack = compose.ComposeStack(compose.ComposeCli(("docker", "compose"), "2.40.0"), Path(tmp_path), settings,
                                 "tflab-trainer:test", build(settings))
    reads = []
    states = {"worker-0": "running 0", "worker-1": "running 0"}
    monkeypatch.setattr(compose.docker, "project_containers", lambda project, service=None: ["a", "b"])
    monkeypatch.setattr(compose.docker, "inspect", lambda ids, template: reads.append(ids) or "\n".join(
        f"{task} {state} false" for task, state in states.items()))
    assert stack.exit_codes() == {"worker-0": None, "worker-1": None}  # no watch yet: reads every time
    assert stack.exit_codes() and len(reads) == 2
    stack.changes = FakeChanges()
    stack.exit_codes()
    for _ in range(5):
        assert stack.exit_codes() == {"worker-0": None, "worker-1": None}
    assert len(reads) == 3
    states["worker-1"] = "exited 137"
    assert stack.exit_codes()["worker-1"] is None  # the engine has not reported it yet
    stack.changes.report()
    assert stack.exit_codes() == {"worker-0": None, "worker-1": 137} and len(reads) == 4
    monkeypatch.setattr(stack, "compose", lambda *args, **kwargs: None)
    stack.stop(["worker-0"])  # the lab's own kill is a change too
    states["worker-0"] = "exited 137"
    assert stack.exit_codes() == {"worker-0": 137, "worker-1": 137} and len(reads) == 5
