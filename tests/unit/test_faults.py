"""The pieces of fault injection that need no Docker: the run's Compose override with limits,
proxies and network mode; the delay proxy itself, on loopback; and what make chaos refuses."""

import asyncio
import json
import socket
import threading
import time

import pytest
from labtest.cli import assert_refused, lab_env, run_lab
from labtest.fakes import FakeBackend, FakeEngine
from tflab.backends import compose
from tflab.core import cluster, runfolder, schema
from tflab.core.errors import LabError
from tflab.core.settings import Settings, SettingsError
from tflab.faults import chaos, registry, soak
from tflab.supervisor import runner
from tflab.supervisor.labrun import LabRun
from tflab.trainer import linkproxy


def test_limits_apply_to_every_task_and_proxies_sit_in_front_of_the_proxied():
    settings = Settings(workers=2, cpus=1.5, memory="2g")
    proxied = frozenset({"worker-1"})
    the_cluster = cluster.build(settings, cluster.linked_address(proxied))
    assert the_cluster.spec == {"worker": ["worker-0:2222", "worker-1-link:2222"]}
    services = compose.render_run(settings, the_cluster, proxied)["services"]
    assert set(services) == {"worker-0", "worker-1", "worker-1-link"}
    for task in ("worker-0", "worker-1"):
        assert services[task]["cpus"] == 1.5 and services[task]["mem_limit"] == "2g"
    link = services["worker-1-link"]
    assert link["command"] == ["python", "-m", "tflab.linkproxy"]
    assert link["environment"] == {"TFLAB_LINK_TO": "worker-1:2222",
                                   "TFLAB_LINK_CONTROL": "/lab/links/worker-1.json"}
    assert link["extends"]["service"] == "task"  # as hardened as a trainer


def test_single_process_runs_get_limits_but_no_cluster_services():
    settings = Settings(strategy="mirrored", cpus=2)
    services = compose.render_run(settings, cluster.build(settings))["services"]
    assert services == {"mirrored": {"cpus": 2.0}}


def test_network_bridge_undoes_internal():
    assert "networks" not in compose.render_run(Settings(), cluster.build(Settings()))
    bridge = compose.render_run(Settings(network="bridge"), cluster.build(Settings()))["networks"]["cluster"]
    assert bridge["internal"] is False


@pytest.mark.parametrize("name, value, expected", [
    ("LINK", "fast", "LINK=fast is not allowed: expected <latency>ms,<rate>mbit such as 1ms,1000mbit"),
    ("LINK", "1ms,0mbit", "LINK=1ms,0mbit is not allowed"),
    ("MEMORY", "lots", "MEMORY=lots is not allowed: expected 0 (no limit) or a size of at least 6m"),
    ("CPUS", "-1", "CPUS=-1 is not allowed: expected CPUs from 0.01 to 64, or 0 (no limit)"),
    ("BACKUP", "sometimes", "BACKUP=sometimes is not allowed: expected epoch, off, or a number of steps"),
    ("AT", "epoch:1.5", "AT=epoch:1.5 is not allowed: expected epoch:N (after N epochs), step:N (at the Nth "
                        "training step, N from 1 to 999999999), seconds:S, save[:N] (while the Nth checkpoint is "
                        "written, N from 1 to 999999), restore (while a restarted target restores its backup) or "
                        "eval[:N] (while the evaluator reads its Nth checkpoint)"),
    ("AT", "save:0", "AT=save:0 is not allowed: expected epoch:N"),
    ("AT", "save:", "AT=save: is not allowed: expected epoch:N"),
    ("AT", "save:1.5", "AT=save:1.5 is not allowed: expected epoch:N"),
    ("AT", "restore:1", "AT=restore:1 is not allowed: expected epoch:N"),
    ("AT", "eval:0", "AT=eval:0 is not allowed: expected epoch:N"),
    ("AT", "evals", "AT=evals is not allowed: expected epoch:N"),
    ("AT", "step:0", "AT=step:0 is not allowed: expected epoch:N (after N epochs), step:N"),
    ("AT", "step:abc", "AT=step:abc is not allowed: expected epoch:N"),
    ("AT", "step:1.5", "AT=step:1.5 is not allowed: expected epoch:N"),
    ("AT", "step:-3", "AT=step:-3 is not allowed: expected epoch:N"),
    ("AT", "step:", "AT=step: is not allowed: expected epoch:N"),
    ("AT", "steps:3", "AT=steps:3 is not allowed: expected epoch:N"),
    ("HEAL", "soon", "HEAL=soon is not allowed: expected seconds, or never"),
    ("SCENARIO", "meteor", "SCENARIO=meteor is not allowed: expected one of kill, stop, pause, partition"),
    ("RESTARTS", "11", "RESTARTS=11 is not allowed: expected an integer from 0 to 10"),
])
def test_fault_settings_refuse_bad_values(name, value, expected):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, {name: value})
    assert str(refused.value).startswith(expected)


def test_heal_never_is_for_partitions_only():
    with pytest.raises(SettingsError, match="HEAL=never is not allowed with SCENARIO=pause"):
        Settings.from_env({}, {"SCENARIO": "pause", "HEAL": "never"})


PREEMPT_ONLY = ("are SCENARIO=preempt's (the notice the target hears, the seconds from it to the kill); expected "
                "SCENARIO=preempt, or {} left out")


@pytest.mark.parametrize("given, expected", [
    ({"NOTICE": "gce"}, "NOTICE=gce is not allowed with SCENARIO=kill: NOTICE and GRACE "),
    ({"SCENARIO": "pause", "GRACE": "30"}, "GRACE=30 is not allowed with SCENARIO=pause: NOTICE and GRACE "),
    ({"SCENARIO": "partition", "NOTICE": "sigterm"}, "NOTICE=sigterm is not allowed with SCENARIO=partition: "),
])
def test_notice_and_grace_given_to_another_scenario_are_refused(given, expected):
    """They were ignored without a word: `make chaos NOTICE=gce` killed its target outright."""
    settings = Settings.from_env({}, given)
    with pytest.raises(LabError) as refused:
        registry.refuse_unread(settings, given)
    name = next(key for key in given if key in ("NOTICE", "GRACE"))
    assert str(refused.value).startswith(expected) and str(refused.value).endswith(PREEMPT_ONLY.format(name))
    registry.refuse_unread(settings.replace(scenario="preempt"), given)  # preempt's own: taken
    registry.refuse_unread(settings, {key: value for key, value in given.items() if key == "SCENARIO"})


def test_make_chaos_refuses_notice_for_another_scenario_before_anything_starts(tmp_path):
    """No docker on PATH: a chaos run that went on would stop there, not start a cluster."""
    runs, no_docker = tmp_path / "runs", str(tmp_path / "no-docker")
    result = run_lab("chaos", f"RUNS_DIR={runs}", "SCENARIO=stop", "GRACE=3", env=lab_env(PATH=no_docker))
    assert_refused(result, "GRACE=3 is not allowed with SCENARIO=stop: NOTICE and GRACE ", runs)
    result = run_lab("chaos", f"RUNS_DIR={runs}", env=lab_env(NOTICE="none", PATH=no_docker))  # the environment's too
    assert_refused(result, "NOTICE=none is not allowed with SCENARIO=kill: NOTICE and GRACE ", runs)


@pytest.mark.parametrize("changes, expected", [
    ({"backend": "local"}, "make chaos needs BACKEND=compose, not BACKEND=local"),
    ({"backend": "swarm", "scenario": "slow-node"}, "SCENARIO=slow-node needs BACKEND=compose; with BACKEND=swarm "
                                                    "make chaos offers kill, stop, pause, partition"),
    ({"backend": "swarm", "scenario": "slow-link"}, "SCENARIO=slow-link needs BACKEND=compose"),
    ({"target": "worker-7"}, "TARGET=worker-7 is not a task of this run; expected one of worker-0, worker-1"),
    ({"at": "epoch:10"}, "AT=epoch:10 is not allowed with EPOCHS=10: expected epoch:1 to epoch:9"),
    ({"at": "step:640", "epochs": 10}, r"AT=step:640 is not allowed with EPOCHS=10 of 64 steps "
                                       r"\(EXAMPLES/GLOBAL_BATCH\): expected step:1 to step:639, so that training "
                                       "is left"),
    ({"at": "step:5", "strategy": "parameter_server"}, "AT=step:5 is not allowed with TARGET=worker-1: a server runs "
                                                       "no training step of its own; expected TARGET=chief-0, or "
                                                       "AT=epoch:N or seconds:S"),
    ({"at": "step:5", "evaluator": 1, "target": "evaluator-0"}, "AT=step:5 is not allowed with TARGET=evaluator-0: "
                                                                "an evaluator runs no training step"),
    ({"scenario": "slow-link", "strategy": "single"}, "SCENARIO=slow-link needs a cluster"),
])
def test_chaos_refuses_what_it_cannot_do(changes, expected):
    settings = Settings().replace(**changes)
    with pytest.raises(LabError, match=expected):
        chaos.Chaos(settings).check(settings)


@pytest.mark.parametrize("scenario", registry.offered("swarm"))
def test_kill_stop_pause_and_partition_act_on_a_stacks_containers_too(scenario, tmp_path, monkeypatch):
    """Checked, then plugged into the runner as its observer: the fault reaches the target
    through the target's own node, and is recorded."""
    settings = Settings(backend="swarm", scenario=scenario, at="seconds:0")
    fault = chaos.Chaos(settings)
    fault.check(settings)
    engine = FakeEngine(monkeypatch)
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    schema.EventLog(runfolder.log_path(tmp_path, "worker-1"), "worker-1").emit(
        "cluster_ready", seconds=1.0, replicas=2, devices=[])
    the_cluster = cluster.build(settings)  # every task runs for three polls, then exits 0
    stack = FakeBackend(the_cluster, tmp_path, [[{}, {}, {}, dict.fromkeys(the_cluster.tasks, 0)]])
    assert runner.supervise(runner.Supervision(LabRun(settings, stack, tmp_path)), fault) == ("ok", [])
    node = ["docker", "-H", "ssh://node-of-worker-1"]
    expected = {"kill": [(("kill", "id-worker-1"), node)],
                "stop": [(("kill", "--signal", "SIGTERM", "id-worker-1"), node)],
                "pause": [(("pause", "id-worker-1"), node)], "partition": [],
                "hang": [(("kill", "--signal", "SIGUSR2", "id-worker-1"), node)],
                "preempt": [(("kill", "--signal", "SIGTERM", "id-worker-1"), node)]}[scenario]
    ran = [(args, node_of) for args, _, node_of in engine.calls]
    assert ran == expected and stack.cuts == (["worker-1"] if scenario == "partition" else [])
    injected = [json.loads(line) for line in (tmp_path / runfolder.CHAOS_LOG).read_text().splitlines()]
    assert [(r["event"], r["target"], r.get("ok")) for r in injected][:1] == [("injected", "worker-1", True)]
    # A preemption also records the target's exit (here by itself, within the grace); no other does.
    assert [r["event"] for r in injected[1:]] == (["exited"] if scenario == "preempt" else [])


def test_a_scripts_faults_are_timed_by_its_own_epochs_or_start_and_say_what_goes_unchecked(tmp_path):
    """SCRIPT: AT=epoch:N counts the target's epoch events (Keras's own, observe.py), whatever EPOCHS
    says; AT=seconds:S counts from its start (a script logs no cluster_ready)."""
    script = tmp_path / "train.py"
    script.write_text("")
    settings = Settings(script=str(script), epochs=2, at="epoch:5")
    fault = chaos.Chaos(settings)
    fault.check(settings)  # EPOCHS is the lab trainer's; the script's epochs are its own
    assert fault.fault_words() == "kill on worker-1 after its script's epoch 5"
    with pytest.raises(LabError, match="^AT=epoch:0 is not allowed: expected epoch:1 or later"):
        chaos.Chaos(settings.replace(at="epoch:0")).check(settings.replace(at="epoch:0"))
    fault.run_dir = tmp_path
    log = schema.EventLog(runfolder.log_path(tmp_path, "worker-1"), "worker-1")
    for number in range(1, 5):
        log.emit("epoch", epoch=number, loss=1.0, seconds=0.1, steps=8)
    assert not fault._due(tmp_path)
    log.emit("epoch", epoch=5, loss=1.0, seconds=0.1, steps=8)
    assert fault._due(tmp_path)
    timed = chaos.Chaos(settings.replace(at="seconds:0"))
    timed.run_dir = tmp_path
    assert timed.fault_words() == "kill on worker-1 0 s after its script started" and not timed._due(tmp_path)
    log.emit("start", role="script", strategy="multiworker", cluster={}, versions={}, settings={})
    assert timed._due(tmp_path)
    assert chaos.Chaos(settings.replace(at="epoch:9")).unchecked(tmp_path) == [
        "weights: a script logs no digest of its weights, so whether every task ended with the same weights is "
        "not checked"]  # a fault never injected is its outcome (test_chaos_landing.py), not a note


def test_soak_needs_compose_on_swarm(tmp_path):
    with pytest.raises(LabError, match="SCENARIO=slow-link needs BACKEND=compose"):
        soak.soak(Settings(backend="swarm", runs_dir=str(tmp_path)))
    assert list(tmp_path.iterdir()) == []


def test_the_default_target_is_the_last_worker():
    assert chaos.Chaos(Settings(workers=3, global_batch=63)).target == "worker-2"
    assert chaos.Chaos(Settings(strategy="parameter_server")).target == "worker-1"


def test_outcomes():
    ok = {"ok": True, "outcome": "ok", "tasks": []}
    assert chaos.outcome_of(ok) == "survived"
    said = {"ok": False, "outcome": "failed", "tasks": [{"error": "gave up after 10 s", "exit_code": 137}]}
    assert chaos.outcome_of(said) == "ended cleanly"
    assert chaos.outcome_of({**said, "outcome": "timed out"}) == "hung"
    # the lab's own stop (Ctrl-C, SIGTERM) killed the tasks: their 137 is not the fault's doing (issue 56)
    assert chaos.outcome_of({**said, "outcome": "interrupted"}) == chaos.INTERRUPTED == "interrupted"


def echo_server() -> int:
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            connection, _ = server.accept()
            threading.Thread(target=lambda c=connection: [c.sendall(d) for d in iter(lambda: c.recv(65536), b"")],
                             daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def test_the_proxy_delays_each_direction_and_follows_its_control_file(tmp_path, monkeypatch):
    """On loopback only: an echo server behind the proxy, a round trip timed before and after
    the control file asks for 40 ms."""
    port = echo_server()
    listen = socket.create_server(("127.0.0.1", 0))
    proxy_port = listen.getsockname()[1]
    listen.close()
    monkeypatch.setattr(linkproxy, "LISTEN_PORT", proxy_port)
    control = tmp_path / "links" / "worker-1.json"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    served = asyncio.run_coroutine_threadsafe(linkproxy.serve(f"127.0.0.1:{port}", control), loop)
    deadline = time.monotonic() + 10
    while True:
        try:
            client = socket.create_connection(("127.0.0.1", proxy_port), timeout=5)
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    def round_trip() -> float:
        started = time.perf_counter()
        client.sendall(b"x" * 100)
        received = b""
        while len(received) < 100:
            received += client.recv(100)
        return time.perf_counter() - started

    direct = min(round_trip() for _ in range(5))
    control.parent.mkdir()
    control.write_text('{"latency_ms": 40, "mbit": 100}')
    time.sleep(linkproxy.POLL_SECONDS * 3)
    slowed = min(round_trip() for _ in range(3))
    client.close()
    time.sleep(0.1)  # the proxy sees the close and ends that connection's pipes
    served.cancel()
    time.sleep(0.1)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    assert direct < 0.03
    assert 0.08 <= slowed < 0.5  # 40 ms each way, plus scheduling


def test_profiles_parse_from_the_link_setting():
    assert linkproxy.Profile.parse("1ms,1000mbit") == linkproxy.Profile(1.0, 1000.0)
    assert linkproxy.Profile.parse("12.5ms,10mbit").to_dict() == {"latency_ms": 12.5, "mbit": 10.0}


def test_soak_takes_a_script_and_checks_every_trial_before_anything_starts(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("")

    def engine_checked(settings):
        raise LabError("every trial was checked; the engine is next")

    monkeypatch.setattr(soak.backends, "check_engine", engine_checked)
    with pytest.raises(LabError, match="^every trial was checked"):
        soak.soak(Settings(script=str(script), epochs=3, soak=12, runs_dir=str(tmp_path / "runs")))
    assert not (tmp_path / "runs").exists()


def test_a_hang_is_released_by_its_own_signal_and_ends_with_a_restart(monkeypatch):
    """SCENARIO=hang: HANG_SIGNAL in, RELEASE_SIGNAL after HEAL (trainer/signals.py answers both),
    and a restart starts the target's program again, not hung."""
    from types import SimpleNamespace

    from tflab.faults.hang import Hang

    engine = FakeEngine(monkeypatch)
    said = []
    driver = SimpleNamespace(settings=Settings(scenario="hang"), target="worker-1", pending=True,
                             undone=lambda by: said.append(by))
    backend = SimpleNamespace(docker_for=lambda task: ["docker"], container=lambda task: f"id-{task}")
    hang = Hang(driver)
    assert hang.inject(backend, "id-worker-1").returncode == 0 and hang.undo(backend).returncode == 0
    assert [args for args, _, _ in engine.calls] == [("kill", "--signal", "SIGUSR2", "id-worker-1"),
                                                      ("kill", "--signal", "SIGCONT", "id-worker-1")]
    hang.after_restart(backend)
    assert said == ["the restart"]
    driver.pending = False
    hang.after_restart(backend)  # released before the restart: nothing more to say
    assert said == ["the restart"]
