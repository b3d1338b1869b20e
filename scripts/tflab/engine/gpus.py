"""GPUS=: which NVIDIA GPUs each task gets, and whether this engine can hand them over at all."""

from __future__ import annotations

import shutil
import subprocess
from typing import Sequence

from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.engine import docker

# /dev/shm of every GPU task. NCCL keeps its buffers there between the GPUs of one container
# (mirrored over several GPUs) and fails in Docker's default 64 MB: NVIDIA/nccl#290. `ipc: host`
# would do too, but it hands the hardened trainers (read_only, cap_drop ALL) the host's IPC
# namespace, and they need none of it: NCCL tells nodes apart by hostname and boot id, each task
# has a hostname of its own, so between containers NCCL talks over the cluster network, as it
# would between machines, and never through shared memory.
GPU_SHM_SIZE = "1gb"


def nvidia_gpus_usable(info: dict) -> bool:
    """Whether the engine can hand NVIDIA GPUs to containers: the NVIDIA runtime is registered
    (`nvidia-ctk runtime configure`, the toolkit's install step), or CDI found NVIDIA devices
    (engines since 28.3 list them in DiscoveredDevices, as nvidia.com/gpu=0 ...). An engine with
    only the toolkit's hook on its PATH could do it too, but shows nothing of it: it is refused,
    and the configure step the message leads to fixes that."""
    runtimes = info.get("Runtimes") or {}
    discovered = info.get("DiscoveredDevices") or []
    return (any(name.startswith("nvidia") for name in runtimes)
            or any(str(device.get("ID", "")).startswith("nvidia.com/gpu") for device in discovered))


def host_gpu_indexes() -> list[str]:
    """The host's NVIDIA GPUs by index, as nvidia-smi numbers them (and Docker's device_ids take
    them); LabError if nvidia-smi cannot say. The host's nvidia-smi: an engine on another machine
    (DOCKER_HOST) has GPUs this cannot see, and then GPUS needs the indexes given."""
    if shutil.which("nvidia-smi") is None:
        raise LabError("nvidia-smi is not on PATH")
    try:
        result = docker.run_quiet(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], timeout=30)
    except subprocess.TimeoutExpired:
        raise LabError("nvidia-smi did not answer in 30 s") from None
    indexes = result.stdout.split()
    if result.returncode != 0 or not indexes or not all(index.isdigit() for index in indexes):
        raise LabError(f"nvidia-smi answered no GPU list ({docker.last_line(result)})")
    return indexes


def check_gpus(settings: Settings, the_cluster: Cluster) -> tuple[str, ...]:
    """GPUS checked against this engine, before anything is built, written or started. Returns
    the host's GPU indexes where GPUS=all must be spread over the workers one by one (gpu_requests
    takes them); empty where the indexes are given or Compose's `count: all` says it."""
    if not settings.gpus:
        return ()
    info = docker.info()
    if not nvidia_gpus_usable(info):
        runtimes = ", ".join(sorted(info.get("Runtimes") or {})) or "none"
        raise LabError(f"GPUS={settings.gpus} needs the NVIDIA container runtime, and this Docker engine "
                       f"has only: {runtimes}; install the NVIDIA Container Toolkit, or leave GPUS empty "
                       "to train on CPUs")
    if settings.gpu_indexes or not the_cluster.jobs:  # one process: Compose's count: all
        return ()
    try:
        return tuple(host_gpu_indexes())
    except LabError as error:
        raise LabError(f"GPUS=all with STRATEGY={settings.strategy} gives each worker one GPU of the "
                       f"host's list, and that list cannot be had: {error}; give the GPU indexes "
                       "instead, such as GPUS=0,1") from None


def gpu_requests(settings: Settings, the_cluster: Cluster, host_gpus: Sequence[str] = ()) -> dict[str, dict]:
    """GPUS: task -> its NVIDIA device request. Single and mirrored take every GPU given (GPUS=all:
    Compose's `count: all`); each worker takes one, in turn over the list (GPUS=all: `host_gpus`),
    so WORKERS beyond the GPUs share them; parameter_server's chief and ps compute nothing and get
    none. One GPU per worker, not all of them: MultiWorkerMirroredStrategy would make every GPU a
    worker sees a replica of its own, and the lab's worker is one replica."""
    if not settings.gpus:
        return {}
    if not the_cluster.jobs:
        request = {"count": "all"} if settings.gpus == "all" else {"device_ids": list(settings.gpu_indexes)}
        return {settings.strategy: request}
    indexes = settings.gpu_indexes or tuple(host_gpus)
    if not indexes:
        raise ValueError("GPUS=all on a cluster needs the host's GPU indexes (check_gpus finds them)")
    return {task: {"device_ids": [indexes[i % len(indexes)]]} for i, task in enumerate(the_cluster.replicas)}


def gpu_service_keys(request: dict) -> dict:
    """What a GPU task's service adds. TF_FORCE_GPU_ALLOW_GROWTH: TensorFlow otherwise takes almost
    all of a GPU's memory at start, and a second worker on the same GPU would find none left."""
    device = {"driver": "nvidia", **request, "capabilities": ["gpu"]}
    return {"deploy": {"resources": {"reservations": {"devices": [device]}}},
            "shm_size": GPU_SHM_SIZE,
            "environment": {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}}
