"""GPUS: the Compose override each value renders (exact), the engine check that refuses before
anything starts, the GPU image's build, its pins, and scripts/gpu-check.sh's own check. No GPU
is needed for any of it; what needs one is scripts/gpu-check.sh, on a GPU host."""

import dataclasses
import json
import re
import subprocess

import pytest
from labtest.cli import REPO
from labtest.fakes import FakeEngine, answered
from tflab import console, images
from tflab.backends import compose
from tflab.core import cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.engine import docker, gpus
from tflab.images import record
from tflab.reports import compare
from tflab.supervisor import runner

ENGINE_WITHOUT_NVIDIA = {"ServerVersion": "20.10.24",
                         "Runtimes": {"io.containerd.runc.v2": {"path": "runc"}, "runc": {"path": "runc"}}}
ENGINE_WITH_NVIDIA = {"ServerVersion": "27.5.1",
                      "Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {"path": "runc"}}}
ENGINE_WITH_CDI = {"ServerVersion": "28.3.0", "Runtimes": {"runc": {"path": "runc"}},
                   "DiscoveredDevices": [{"Source": "cdi", "ID": "nvidia.com/gpu=0"},
                                         {"Source": "cdi", "ID": "nvidia.com/gpu=all"}]}


def reserved(**request) -> dict:
    """What a GPU task's service gets, written out here rather than taken from compose.py."""
    return {"deploy": {"resources": {"reservations": {"devices": [
                {"driver": "nvidia", **request, "capabilities": ["gpu"]}]}}},
            "shm_size": "1gb"}


def one_process(settings: Settings, **request) -> dict:
    service = {"environment": {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}, **reserved(**request)} if request else {}
    return {"services": {settings.strategy: service}}


def cluster_tasks(settings: Settings, gpu_of: dict[str, str]) -> dict:
    spec = cluster.cluster_spec(settings)
    services = {}
    for task in cluster.build(settings).tasks:
        job, index = cluster.parse_task(task)
        services[task] = {
            "extends": {"file": str(compose.COMPOSE_FILE), "service": "task"},
            "hostname": task,
            "environment": {"TFLAB_TASK": task, "TF_CONFIG": json.dumps(
                {"cluster": spec, "task": {"type": job, "index": index}}, separators=(",", ":"))},
        }
        if task in gpu_of:
            services[task]["environment"]["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
            services[task].update(reserved(device_ids=[gpu_of[task]]))
    return {"services": services}


def rendered(settings: Settings, host_gpus=()) -> dict:
    return compose.render_run(settings, cluster.build(settings), host_gpus=host_gpus)


@pytest.mark.parametrize("strategy", ["single", "mirrored"])
def test_one_process_takes_every_gpu_it_is_given(strategy):
    settings = Settings(strategy=strategy)
    assert rendered(settings) == one_process(settings)
    assert rendered(settings.replace(gpus="all")) == one_process(settings, count="all")
    assert rendered(settings.replace(gpus="0")) == one_process(settings, device_ids=["0"])
    assert rendered(settings.replace(gpus="0,1")) == one_process(settings, device_ids=["0", "1"])
    # The host's list is for spreading workers; one process with GPUS=all leaves it to `count: all`.
    assert rendered(settings.replace(gpus="all"), host_gpus=("0", "1")) == one_process(settings, count="all")


def test_without_gpus_nothing_changes():
    for workers in (2, 3):
        settings = Settings(strategy="multiworker", workers=workers, global_batch=48 * workers)
        assert rendered(settings) == cluster_tasks(settings, {})
        assert rendered(settings, host_gpus=("0", "1")) == cluster_tasks(settings, {})


def test_each_worker_takes_one_gpu_in_turn():
    two = Settings(strategy="multiworker", workers=2)
    three = Settings(strategy="multiworker", workers=3, global_batch=96)
    assert rendered(two.replace(gpus="0,1")) == cluster_tasks(two, {"worker-0": "0", "worker-1": "1"})
    assert rendered(two.replace(gpus="0")) == cluster_tasks(two, {"worker-0": "0", "worker-1": "0"})
    assert rendered(two.replace(gpus="3,1")) == cluster_tasks(two, {"worker-0": "3", "worker-1": "1"})
    assert rendered(three.replace(gpus="0,1")) == cluster_tasks(
        three, {"worker-0": "0", "worker-1": "1", "worker-2": "0"})
    assert rendered(three.replace(gpus="0")) == cluster_tasks(
        three, {"worker-0": "0", "worker-1": "0", "worker-2": "0"})


def test_gpus_all_spreads_the_workers_over_the_hosts_gpus():
    two = Settings(strategy="multiworker", workers=2, gpus="all")
    three = Settings(strategy="multiworker", workers=3, global_batch=96, gpus="all")
    assert rendered(two, ("0", "1")) == cluster_tasks(two, {"worker-0": "0", "worker-1": "1"})
    assert rendered(three, ("0", "1")) == cluster_tasks(three, {"worker-0": "0", "worker-1": "1", "worker-2": "0"})
    assert rendered(three, ("0", "1", "2", "3")) == cluster_tasks(
        three, {"worker-0": "0", "worker-1": "1", "worker-2": "2"})
    # The indexes given win over the host's list.
    assert rendered(two.replace(gpus="1"), ("0", "1")) == cluster_tasks(two, {"worker-0": "1", "worker-1": "1"})
    with pytest.raises(ValueError, match="needs the host's GPU indexes"):
        rendered(two)


def test_parameter_server_gives_gpus_to_its_workers_only():
    settings = Settings(strategy="parameter_server", workers=3, ps=2, gpus="0,1")
    assert rendered(settings) == cluster_tasks(settings, {"worker-0": "0", "worker-1": "1", "worker-2": "0"})


def test_gpus_sit_beside_limits_and_proxies():
    settings = Settings(strategy="multiworker", workers=2, gpus="1", cpus=2, memory="2g")
    services = compose.render_run(settings, cluster.build(settings), frozenset(["worker-1"]))["services"]
    assert services["worker-1"]["cpus"] == 2 and services["worker-1"]["mem_limit"] == "2g"
    assert services["worker-1"]["deploy"] == reserved(device_ids=["1"])["deploy"]
    assert "deploy" not in services["worker-1-link"] and "shm_size" not in services["worker-1-link"]


def test_the_trainers_stay_hardened_with_gpus():
    """The override adds GPU keys only: no ipc, no privileges, no devices beyond the request."""
    for settings in (Settings(strategy="mirrored", gpus="all"), Settings(strategy="multiworker", gpus="0,1")):
        for service in rendered(settings)["services"].values():
            assert not {"ipc", "privileged", "cap_add", "devices", "runtime", "security_opt"} & set(service)


def info_answer(monkeypatch, answer: dict) -> list:
    """An engine that answers `docker info` with `answer`, and only that; the commands it was given."""
    def only_info(command: list[str]):
        assert command == ["docker", "info", "--format", "{{json .}}"]
        return answered(command, 0, json.dumps(answer) + "\n")

    return FakeEngine(monkeypatch, only_info).commands


def check_gpus(settings: Settings) -> tuple[str, ...]:
    return gpus.check_gpus(settings, cluster.build(settings))


def test_an_engine_without_the_nvidia_runtime_is_refused(monkeypatch):
    calls = info_answer(monkeypatch, ENGINE_WITHOUT_NVIDIA)
    with pytest.raises(LabError) as refused:
        check_gpus(Settings(strategy="mirrored", gpus="all"))
    assert str(refused.value) == (
        "GPUS=all needs the NVIDIA container runtime, and this Docker engine has only: io.containerd.runc.v2, "
        "runc; install the NVIDIA Container Toolkit, or leave GPUS empty to train on CPUs")
    assert len(calls) == 1
    with pytest.raises(LabError, match=r"^GPUS=0,1 needs the NVIDIA container runtime"):
        check_gpus(Settings(gpus="0,1"))


def test_an_unreadable_engine_answer_is_refused_too(monkeypatch):
    FakeEngine(monkeypatch, stdout="not json")
    with pytest.raises(LabError, match="this Docker engine has only: none; install"):
        check_gpus(Settings(gpus="0"))


def test_no_gpus_asks_the_engine_nothing(monkeypatch):
    engine = FakeEngine(monkeypatch)
    assert check_gpus(Settings()) == () and engine.commands == []


@pytest.mark.parametrize("engine", [ENGINE_WITH_NVIDIA, ENGINE_WITH_CDI])
def test_an_engine_with_nvidia_gpus_passes(monkeypatch, engine):
    info_answer(monkeypatch, engine)
    monkeypatch.setattr(gpus, "host_gpu_indexes", lambda: ["0", "1", "2"])
    assert check_gpus(Settings(strategy="mirrored", gpus="all")) == ()  # count: all
    assert check_gpus(Settings(gpus="0,1")) == ()  # the indexes given
    assert check_gpus(Settings(gpus="all")) == ("0", "1", "2")  # workers need the list


def test_gpus_all_on_a_cluster_without_a_gpu_list_is_refused(monkeypatch):
    info_answer(monkeypatch, ENGINE_WITH_NVIDIA)
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    with pytest.raises(LabError) as refused:
        check_gpus(Settings(strategy="multiworker", gpus="all"))
    assert str(refused.value) == (
        "GPUS=all with STRATEGY=multiworker gives each worker one GPU of the host's list, and that list "
        "cannot be had: nvidia-smi is not on PATH; give the GPU indexes instead, such as GPUS=0,1")


@pytest.mark.parametrize("returncode, stdout, expected", [
    (0, "0\n1\n", ["0", "1"]),
    (0, "0\n", ["0"]),
    (9, "", None),  # the driver is not loaded
    (0, "No devices were found\n", None),
])
def test_the_host_gpu_list_comes_from_nvidia_smi(monkeypatch, returncode, stdout, expected):
    monkeypatch.setattr(gpus.shutil, "which", lambda name: f"/usr/bin/{name}")

    engine = FakeEngine(monkeypatch, lambda command: answered(command, returncode, stdout,
                                                             "NVIDIA-SMI has failed" * (returncode != 0)))
    if expected is None:
        with pytest.raises(LabError, match="nvidia-smi answered no GPU list"):
            gpus.host_gpu_indexes()
    else:
        assert gpus.host_gpu_indexes() == expected
    assert engine.commands == [["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"]]


def test_a_refused_gpu_run_writes_and_builds_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(docker, "check", lambda: "20.10.24")
    monkeypatch.setattr(compose, "find_compose", lambda choice: compose.ComposeCli(("docker-compose",), "1.29.2"))
    monkeypatch.setattr(docker, "info", lambda: ENGINE_WITHOUT_NVIDIA)
    monkeypatch.setattr(images, "ensure_image", lambda *args, **kwargs: pytest.fail("an image was built"))
    runs = tmp_path / "runs"
    for settings in (Settings(gpus="all", runs_dir=str(runs)),
                     Settings(strategy="mirrored", gpus="0", runs_dir=str(runs), compare="single mirrored-2")):
        with pytest.raises(LabError, match="needs the NVIDIA container runtime"):
            runner.up(settings)
        with pytest.raises(LabError, match="needs the NVIDIA container runtime"):
            compare.compare(settings)
    assert not runs.exists()


def test_each_variant_installs_from_a_folder_of_its_own_pins_and_wheels(monkeypatch, tmp_path):
    """The packages install sees the script, the variant's pins as requirements.txt and its
    wheelhouse, nothing else: the GPU and arm64 wheels never travel with a CPU image."""
    contexts = {}

    def install(base, folder, mounted_at, command, tag, changes, label, what, say, summarise, platform="",
                unpacked=None):
        contexts[tag] = sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())
        assert base == "tflab-base:bookworm" and command == ["sh", f"{mounted_at}/install-packages.sh"]
        assert (folder / "requirements.txt").read_bytes() == image.requirements.read_bytes()
        assert 'CMD ["python", "-m", "tflab.train"]' in changes and "USER 1000:1000" in changes
        assert f"LABEL {label}" in changes
        return 0, ""

    monkeypatch.setattr(images.builder, "install_and_commit", install)
    monkeypatch.setattr(images, "ensure_wheels", lambda image: None)
    for module in (images, record):  # image_id is read in both: the builds, and the record's removals
        monkeypatch.setattr(module, "image_id", lambda name: None)
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
    for image in (images.variant_for(""), images.variant_for("all")):
        wheels = tmp_path / image.name
        wheels.mkdir()
        (wheels / f"{image.name}-1.0-py3-none-any.whl").write_text("wheel")
        (wheels / "README.md").write_text("not sent")
        image = dataclasses.replace(image, wheels=wheels)
        tag = images.ensure_packages(image, "tflab-base:bookworm", "sha256:base", images.AMD64)
        assert tag.startswith(f"tflab-trainer-packages:{image.name}-")
        assert contexts[tag] == ["install-packages.sh", "requirements.txt",
                                 f"wheels/{image.name}-1.0-py3-none-any.whl"]
        assert not list(wheels.parent.glob(".context-*"))  # the scratch context is gone
    assert record.built_images() == list(contexts)


def test_the_gpu_image_is_the_same_dockerfiles_with_other_packages():
    gpu = images.variant_for("0,1")
    assert images.variant_for("all") == gpu
    assert gpu.name == "gpu"
    assert gpu.requirements.is_file() and gpu.wheels.is_dir()
    assert {gpu.wheels, gpu.stamp.parent} & {images.WHEELS} == set()
    assert images.packages_tag(gpu, "sha256:base").startswith("tflab-trainer-packages:gpu-")
    assert images.packages_tag(gpu, "sha256:base") != images.packages_tag(images.variant_for(""), "sha256:base")


def test_the_image_tag_is_a_digest_of_what_it_is_built_from(monkeypatch, tmp_path):
    """Two checkouts or versions of the lab on one engine never share or overwrite an image: the tag
    changes with the base, the pins or the code, and is the same for the same inputs. The packages
    image's tag does not change with the code: a code change never rebuilds it."""
    cpu, gpu = images.variant_for(""), images.variant_for("all")
    tag = images.image_tag(cpu, "sha256:base")
    assert re.fullmatch(r"tflab-trainer:cpu-[0-9a-f]{12}", tag)
    assert images.image_tag(cpu, "sha256:base") == tag
    assert images.image_tag(cpu, "sha256:other-base") != tag
    assert images.image_tag(gpu, "sha256:base").startswith("tflab-trainer:gpu-")
    code = tmp_path / "scripts/tflab"
    code.mkdir(parents=True)
    for path in [images.DOCKERFILE, images.INSTALL_SCRIPT, images.REQUIREMENTS]:
        (tmp_path / path.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path.relative_to(REPO)).write_bytes(path.read_bytes())
    (code / "train.py").write_text("print('a')\n")
    monkeypatch.setattr(images, "REPO", tmp_path)
    monkeypatch.setattr(images, "CODE", code)
    monkeypatch.setattr(images, "DOCKERFILE", tmp_path / "images/trainer/Dockerfile")
    monkeypatch.setattr(images, "INSTALL_SCRIPT", tmp_path / "images/trainer/install-packages.sh")
    requirements = tmp_path / "requirements/trainer.txt"
    before = images.build_inputs_digest("sha256:base", requirements)
    packages = images.packages_inputs_digest("sha256:base", requirements)
    (code / "train.py").write_text("print('b')\n")
    assert images.build_inputs_digest("sha256:base", requirements) != before
    assert images.packages_inputs_digest("sha256:base", requirements) == packages
    images.INSTALL_SCRIPT.write_text("changed")
    assert images.packages_inputs_digest("sha256:base", requirements) != packages


def test_a_gpu_run_builds_the_gpu_image_and_replaces_only_its_own_predecessor(monkeypatch, tmp_path):
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
    record.record_built("tflab-trainer:cpu-aaaaaaaaaaaa")
    record.record_built("tflab-trainer:gpu-bbbbbbbbbbbb")
    record.record_built("tflab-trainer-packages:gpu-cccccccccccc")
    monkeypatch.setattr(images, "engine_platform", lambda: images.AMD64)
    monkeypatch.setattr(images, "ensure_base", lambda requested, platform, native: "python:3.11-slim")
    present = {"python:3.11-slim"}
    for module in (images, record):  # image_id is read in both: the builds, and the record's removals
        monkeypatch.setattr(module, "image_id", lambda name: f"sha256:{name}" if name in present else None)
    wheels = []
    monkeypatch.setattr(images, "ensure_wheels", lambda image: wheels.append(image.wheels))
    commands, builds = FakeEngine(monkeypatch).commands, []

    def build(dockerfile, context, tag, build_args, platform=""):
        builds.append((dockerfile.name, tag, build_args))
        present.add(tag)

    def install(base, folder, mounted_at, command, tag, *args, **kwargs):
        builds.append(("install-packages.sh", tag, {"BASE_IMAGE": base}))
        present.add(tag)
        return 0, ""

    monkeypatch.setattr(images, "docker_build", build)
    monkeypatch.setattr(images.builder, "install_and_commit", install)
    tag = images.ensure_image("", images.variant_for("all"))
    packages = images.packages_tag(images.variant_for("all"), "sha256:python:3.11-slim")
    assert tag == images.image_tag(images.variant_for("all"), "sha256:python:3.11-slim")
    assert builds == [("install-packages.sh", packages, {"BASE_IMAGE": "python:3.11-slim"}),
                      ("Dockerfile", tag, {"PACKAGES_IMAGE": packages})]
    assert wheels == [images.GPU_WHEELS]
    assert ["docker", "image", "rm", "tflab-trainer:gpu-bbbbbbbbbbbb"] in commands
    assert ["docker", "image", "rm", "tflab-trainer-packages:gpu-cccccccccccc"] in commands
    assert not any("cpu-aaaaaaaaaaaa" in " ".join(command) for command in commands)
    assert record.built_images() == ["tflab-trainer:cpu-aaaaaaaaaaaa", packages, tag]
    assert images.ensure_image("", images.variant_for("all")) == tag
    assert len(builds) == 2  # nothing changed
    # A code change: the trainer image only, on the same packages image.
    present.discard(tag)
    images.ensure_image("", images.variant_for("all"))
    assert [name for name, _, _ in builds[2:]] == ["Dockerfile"]


def pins(path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_the_gpu_pins_are_the_cpu_pins_with_cuda():
    cpu, gpu = pins(images.REQUIREMENTS), pins(images.GPU_REQUIREMENTS)
    assert gpu.pop("tensorflow[and-cuda]") == cpu.pop("tensorflow-cpu")
    cuda = {name: version for name, version in gpu.items() if name not in cpu}
    assert {name: version for name, version in gpu.items() if name in cpu} == cpu
    assert cuda and all(re.fullmatch(r"nvidia-[a-z-]+-cu12", name) for name in cuda), cuda
    assert {"nvidia-nccl-cu12", "nvidia-cudnn-cu12", "nvidia-cublas-cu12"} <= set(cuda)


def describe(settings: Settings) -> str:
    return console.describe_run(settings, cluster.build(settings))


def test_the_run_line_names_the_gpus():
    assert describe(Settings(strategy="multiworker", gpus="0,1")).startswith(
        "multiworker, 2 workers, GPUS=0,1, mlp")
    assert describe(Settings(strategy="mirrored", gpus="0,1,2,3")).startswith(
        "mirrored, 4 replicas, GPUS=0,1,2,3, mlp")
    assert describe(Settings(strategy="mirrored", gpus="all")).startswith(
        "mirrored, a replica per GPU, GPUS=all, mlp")
    assert describe(Settings(strategy="mirrored")).startswith("mirrored, 2 replicas, mlp")


GPU_CHECK = REPO / "scripts" / "gpu-check.sh"


def test_the_gpu_check_script_parses():
    result = subprocess.run(["bash", "-n", str(GPU_CHECK)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def fake_run(folder, ok: bool, devices: dict[str, list[str]]):
    folder.mkdir(parents=True)
    tasks = [{"task": task, "role": "trainer", "status": "ok" if ok else "failed"} for task in devices]
    (folder / "summary.json").write_text(json.dumps({"ok": ok, "outcome": "ok" if ok else "failed", "tasks": tasks}))
    for task, found in devices.items():
        lines = [{"event": "start", "task": task, "time": 1.0},
                 {"event": "cluster_ready", "task": task, "time": 2.0, "seconds": 1.0, "replicas": len(found),
                  "devices": found}]
        (folder / f"{task}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def gpu_check(folder) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(GPU_CHECK), "--check", str(folder)], capture_output=True, text=True,
                          timeout=60)


def test_the_gpu_check_passes_a_run_on_gpus(tmp_path):
    nccl = fake_run(tmp_path / "gpu-nccl", True, {
        "worker-0": ["/job:worker/replica:0/task:0/device:GPU:0"],
        "worker-1": ["/job:worker/replica:0/task:1/device:GPU:0"]})
    result = gpu_check(nccl)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gpu-check: gpu-nccl worker-1: ok, replicas on /job:worker/replica:0/task:1/device:GPU:0" in result.stdout
    assert result.stdout.splitlines()[-1] == "gpu-check: ok gpu-nccl"


@pytest.mark.parametrize("ok, devices, expected", [
    (True, {"mirrored": ["/job:localhost/replica:0/task:0/device:CPU:0",
                         "/job:localhost/replica:0/task:0/device:CPU:1"]}, "mirrored did not train on GPUs only"),
    (True, {"worker-0": ["/job:worker/replica:0/task:0/device:GPU:0"], "worker-1": []},
     "worker-1 did not train on GPUs only"),
    (False, {"mirrored": ["/job:localhost/replica:0/task:0/device:GPU:0"]}, "the run ended failed"),
])
def test_the_gpu_check_fails_a_run_off_gpus(tmp_path, ok, devices, expected):
    result = gpu_check(fake_run(tmp_path / "gpu-run", ok, devices))
    assert result.returncode == 1
    assert result.stderr.strip().startswith("gpu-check: FAILED gpu-run:") and expected in result.stderr


def test_the_gpu_check_fails_a_run_without_a_summary(tmp_path):
    (tmp_path / "gpu-run").mkdir()
    result = gpu_check(tmp_path / "gpu-run")
    assert result.returncode == 1 and "no readable summary.json" in result.stderr


@pytest.mark.tensorflow
def test_a_trainer_given_gpus_that_sees_none_fails_saying_so(tmp_path):
    """This machine has no GPU, so TensorFlow sees none: exactly what a run whose GPUs did not reach
    its container looks like from inside."""
    from tflab.core.schema import EventLog
    from tflab.trainer import train  # TensorFlow: imported here, so only this test pays for it

    log = EventLog(tmp_path / "mirrored.jsonl", "mirrored")
    if train.tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="GPUS=0 but TensorFlow sees no GPU in this container"):
        train.train(Settings(strategy="mirrored", gpus="0"), "mirrored", {}, tmp_path, log, None, None)
    log.close()


def test_the_docs_show_the_override_as_rendered():
    section = (REPO / "docs/gpus.md").read_text()
    shown = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    settings = Settings(strategy="multiworker", workers=3, global_batch=96, gpus="0,1", collective="nccl")
    service = rendered(settings)["services"]["worker-2"]
    assert shown["extends"] == {"file": ".../docker-compose.yml", "service": "task"}
    assert shown["environment"].pop("TF_CONFIG") == "..."
    service["environment"].pop("TF_CONFIG")
    assert {**shown, "extends": service["extends"]} == service


def test_bench_refuses_gpus_before_anything(tmp_path):
    from tflab.reports import bench

    runs = tmp_path / "runs"
    with pytest.raises(LabError, match=r"^make bench does not take GPUS=0: it measures the lab against BACKEND=local"):
        bench.bench(Settings(gpus="0", runs_dir=str(runs)))
    assert not runs.exists()


def test_a_multiworker_chief_takes_a_gpu_like_any_replica_and_the_evaluator_none():
    settings = Settings(strategy="multiworker", chief=1, workers=2, evaluator=1, gpus="0,1", global_batch=96)
    assert gpus.gpu_requests(settings, cluster.build(settings)) == {
        "chief-0": {"device_ids": ["0"]}, "worker-0": {"device_ids": ["1"]}, "worker-1": {"device_ids": ["0"]}}
