"""What a replay asks of the Docker engine before anything starts: every image already on it (the
lab pulls and builds nothing for a TFJob), the image's own user where runAsNonRoot leaves it to the
image, CPU limits within the engine's CPUs; and each image's Config, read once for the hooks and
the summary."""

from __future__ import annotations

import json

from tflab.core.commands import lab_command
from tflab.core.errors import LabError
from tflab.engine import docker
from tflab.k8s.manifest import ManifestError, shown
from tflab.k8s.tfjob import Plan


def check_images(plan: Plan) -> None:
    """Every image on the engine already: the lab pulls and builds nothing for a TFJob. And what
    the manifest asks of the engine that only the engine can answer: the image's own user where
    runAsNonRoot leaves it to the image (the kubelet's check), CPU limits within the engine's CPUs."""
    for image in sorted({task.image for task in plan.tasks}):
        found = docker.image_user(image)
        if found.returncode != 0:
            raise LabError(f"image {image} is not on this Docker engine; build it (docker build -t {image} ...; "
                           "an example's Dockerfile builds on the lab's image without a registry: with `ARG BASE` "
                           f"and `FROM $BASE`, docker build --build-arg BASE=$({tag_command()}) "
                           f"-t {image} FOLDER) or pull it (docker pull {image}) first")
        if any(task.non_root for task in plan.tasks if task.image == image):
            try:
                check_non_root(image, found.stdout.strip())
            except ManifestError as error:
                raise ManifestError(f"{plan.setting}={plan.path}: {error}") from None
    limited = [task for task in plan.tasks if "cpus" in task.service]
    if limited:
        engine_cpus = docker_cpus()
        for task in limited:
            if engine_cpus and task.service["cpus"] > engine_cpus:
                raise ManifestError(f"{plan.setting}={plan.path}: {task.name}'s resources.limits.cpu is "
                                    f"{task.service['cpus']:g}, more than this Docker engine's {engine_cpus} CPUs; "
                                    f"expected at most {engine_cpus}")


def tag_command() -> str:
    """The command that prints the lab's image tag bare (docs/images.md), as the user can type it:
    make has no --tag, so under make it is the checkout's python3 -m tflab."""
    command = lab_command("images --tag")
    return "PYTHONPATH=scripts python3 -m tflab images --tag" if command.startswith("make ") else command


def image_configs(plan: Plan) -> dict[str, dict]:
    """image -> its Config (Env, Entrypoint, Cmd), read once before the run: the hooks keep the
    image's PYTHONPATH, and the summary names the command where they could not reach its Python."""
    found = {}
    for image in sorted({task.image for task in plan.tasks}):
        result = docker.image_inspect(image, "{{json .Config}}")
        try:
            config = json.loads(result.stdout) if result.returncode == 0 else {}
        except ValueError:
            config = {}
        found[image] = config if isinstance(config, dict) else {}
    return found


def image_env(config: dict) -> dict[str, str]:
    pairs = [entry.split("=", 1) for entry in config.get("Env") or [] if isinstance(entry, str) and "=" in entry]
    return dict(pairs)


def check_non_root(image: str, user_json: str) -> None:
    """The kubelet's verifyRunAsNonRoot: the image's user must be a number other than 0 (a name
    cannot be checked, so it is refused), where runAsNonRoot is true and runAsUser unset."""
    try:
        user = json.loads(user_json or '""')
    except ValueError:
        user = ""
    uid = str(user).split(":", 1)[0] if isinstance(user, str) else ""
    if not uid.isdigit() or int(uid) == 0:
        what = "root" if uid in ("", "0", "root") else f"the non-numeric user {shown(uid)}"
        raise ManifestError(f"image {image} runs as {what}, but its pod asks runAsNonRoot: true (the kubelet "
                            "refuses it); give securityContext.runAsUser a non-zero uid, or build the image with a "
                            "numeric non-root USER")


def docker_cpus() -> int:
    """The engine's CPUs (docker info's NCPU), 0 where it does not say."""
    found = docker.info_format("{{.NCPU}}")
    text = found.stdout.strip() if found.returncode == 0 else ""
    return int(text) if text.isdigit() else 0
