"""docker.py's verbs spell exactly the command lines their callers spelled themselves before the
verbs existed (the argv, the timeout, the engine), so moving them changed nothing the engine sees."""


import pytest
from labtest.fakes import FakeEngine
from tflab.engine import docker, dockerswarm

OTHER = ["docker", "-H", "unix:///sim/n1/docker.sock"]


@pytest.fixture
def cli(monkeypatch) -> FakeEngine:
    return FakeEngine(monkeypatch, stdout="1380000000\n")


VERBS = [
    (lambda: docker.info_format("{{.NCPU}}"), ("info", "--format", "{{.NCPU}}"), 60, None),
    (lambda: docker.server_version(), ("version", "--format", "{{.Server.Version}} {{.Server.APIVersion}}"), 60, None),
    (lambda: docker.engine_version(OTHER), ("version", "--format", "{{.Server.Version}}"), 10, OTHER),
    (lambda: docker.image_inspect("i", "{{.Id}}"), ("image", "inspect", "--format", "{{.Id}}", "i"), 60, None),
    (lambda: docker.image_inspect("i"), ("image", "inspect", "i"), 60, None),
    (lambda: docker.image_user("-i"), ("image", "inspect", "--format", "{{json .Config.User}}", "--", "-i"), 60, None),
    (lambda: docker.image_size("i"), ("image", "inspect", "--format", "{{.Size}}", "i"), 60, None),
    (lambda: docker.images_inspect(["a", "b"], "{{.Id}}"), ("image", "inspect", "--format", "{{.Id}}", "a", "b"), 60,
     None),
    (lambda: docker.image_remove("i"), ("image", "rm", "i"), 60, None),
    (lambda: docker.image_remove("i", force=True, timeout=120), ("image", "rm", "--force", "i"), 120, None),
    (lambda: docker.dangling_images(all_layers=True),
     ("image", "ls", "--all", "--quiet", "--no-trunc", "--filter", "dangling=true"), 60, None),
    (lambda: docker.dangling_images(label="tflab.image"),
     ("image", "ls", "--quiet", "--filter", "dangling=true", "--filter", "label=tflab.image"), 60, None),
    (lambda: docker.pull("n", "linux/arm64"), ("pull", "--quiet", "--platform", "linux/arm64", "n"), 600, None),
    (lambda: docker.pull("n", ""), ("pull", "--quiet", "n"), 600, None),
    (lambda: docker.tag("i", "r/i"), ("tag", "i", "r/i"), 60, None),
    (lambda: docker.commit("c", "t", ["ENV A=1", "USER 1"]),
     ("commit", "--change", "ENV A=1", "--change", "USER 1", "c", "t"), 1800, None),
    (lambda: docker.run_isolated("b", "true"), ("run", "--rm", "--network", "none", "--entrypoint", "true", "b"), 120,
     None),
    (lambda: docker.create("n", "b", ["sh", "x"], ["--label", "l"]), ("create", "--name", "n", "--label", "l", "b",
                                                                       "sh", "x"), 60, None),
    (lambda: docker.kill(["c"], "SIGTERM", engine=OTHER), ("kill", "--signal", "SIGTERM", "c"), 60, OTHER),
    (lambda: docker.kill(["c", "d"]), ("kill", "c", "d"), 60, None),
    (lambda: docker.pause("c"), ("pause", "c"), 60, None),
    (lambda: docker.unpause("c", engine=OTHER), ("unpause", "c"), 60, OTHER),
    (lambda: docker.update_cpus("c", 0.5), ("update", "--cpus", "0.5", "c"), 60, None),
    (lambda: docker.remove_containers("c"), ("rm", "--force", "--volumes", "c"), 120, None),
    (lambda: docker.remove_containers("c", volumes=False, engine=OTHER), ("rm", "--force", "c"), 120, OTHER),
    (lambda: docker.all_containers(OTHER), ("ps", "--all", "--quiet"), 60, OTHER),
    (lambda: docker.labelled_containers("k=v", engine=OTHER), ("ps", "--all", "--quiet", "--filter", "label=k=v"), 60,
     OTHER),
    (lambda: docker.container_inspect("c", "{{.Image}}"), ("inspect", "--format", "{{.Image}}", "c"), 60, None),
    (lambda: docker.inspect_json(["t1", "t2"]), ("inspect", "t1", "t2"), 60, None),
    (lambda: docker.run_in_namespace("c", "i", "python3", "-c", "s"),
     ("run", "--rm", "--network", "container:c", "--cap-add", "NET_ADMIN", "--user", "0:0", "--entrypoint",
      "python3", "i", "-c", "s"), 60, None),
    (lambda: docker.network_connect("n", "c", alias="worker-0"), ("network", "connect", "--alias", "worker-0", "n",
                                                                   "c"), 60, None),
    (lambda: docker.network_disconnect("n", "c"), ("network", "disconnect", "n", "c"), 60, None),
    (lambda: docker.labelled_networks("k=v"), ("network", "ls", "--quiet", "--filter", "label=k=v"), 60, None),
    (lambda: docker.network_remove("a", "b"), ("network", "rm", "a", "b"), 60, None),
    (lambda: dockerswarm.node_ls("{{.ID}}"), ("node", "ls", "--format", "{{.ID}}"), 60, None),
    (lambda: dockerswarm.node_remove("n"), ("node", "rm", "--force", "n"), 60, None),
    (lambda: dockerswarm.swarm_leave(OTHER), ("swarm", "leave", "--force"), 60, OTHER),
    (lambda: dockerswarm.service_ls(), ("service", "ls", "--quiet"), 60, None),
    (lambda: dockerswarm.service_ls("k"), ("service", "ls", "--quiet", "--filter", "label=k"), 60, None),
    (lambda: dockerswarm.service_ls("k=s", template="{{.ID}} {{.Name}}"),
     ("service", "ls", "--filter", "label=k=s", "--format", "{{.ID}} {{.Name}}"), 60, None),
    (lambda: dockerswarm.service_inspect(["a"], "{{.ID}}"), ("service", "inspect", "--format", "{{.ID}}", "a"), 60,
     None),
    (lambda: dockerswarm.service_update_force("s"), ("service", "update", "--force", "--detach", "--quiet", "s"), 120,
     None),
    (lambda: dockerswarm.service_remove("a", "b"), ("service", "rm", "a", "b"), 60, None),
    (lambda: dockerswarm.stack_deploy("/r/stack.run.json", "st"),
     ("stack", "deploy", "--resolve-image", "never", "--compose-file", "/r/stack.run.json", "st"), 300, None),
    (lambda: dockerswarm.stack_ps("st"), ("stack", "ps", "--no-trunc", "--quiet", "st"), 60, None),
    (lambda: dockerswarm.stack_ps("st", "{{.Name}}"), ("stack", "ps", "--no-trunc", "--format", "{{.Name}}", "st"), 60,
     None),
    (lambda: dockerswarm.stack_remove("st"), ("stack", "rm", "st"), 120, None),
]


@pytest.mark.parametrize("call, argv, timeout, engine", VERBS)
def test_each_verb_is_the_command_line_its_callers_spelled(cli, call, argv, timeout, engine):
    call()
    assert cli.calls == [(argv, timeout, engine)]


def test_the_argv_builders_for_streams_and_the_swarm_sim():
    assert docker.start_attached_command("c") == ["docker", "start", "--attach", "c"]
    assert dockerswarm.swarm_init_command("198.18.213.1", "198.18.213.1:2377") == [
        "docker", "swarm", "init", "--advertise-addr", "198.18.213.1", "--listen-addr", "198.18.213.1:2377"]
    assert dockerswarm.swarm_join_command("tok", "198.18.213.11", "198.18.213.1:2377", OTHER) == [
        *OTHER, "swarm", "join", "--token", "tok", "--advertise-addr", "198.18.213.11", "--listen-addr",
        "198.18.213.11:2377", "198.18.213.1:2377"]
    assert dockerswarm.swarm_info_command(OTHER) == [*OTHER, "info", "--format", "{{json .Swarm}}"]
    assert dockerswarm.swarm_join_token_command() == ["docker", "swarm", "join-token", "--quiet", "worker"]
    assert docker.build_command("D", "C", "I", "linux/arm64", ["--build-arg", "A=1"], ["--force-rm"]) == [
        "docker", "build", "--force-rm", "--file", "D", "--platform", "linux/arm64", "--build-arg", "A=1",
        "--iidfile", "I", "C"]
