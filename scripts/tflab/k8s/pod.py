"""A replica's pod template as the Compose service the replay runs: the one container the lab runs
(a TFJob's `tensorflow`, a TrainJob's `node`), its command, env, resources, securityContext and
volumes, checked as the API server and the kubelet would check them beyond the schema, and what
Docker cannot take; every field it does not apply is returned to be named, one it cannot honour
(a Secret, a hostPath, a subPath) refused in one line. Shared by the TFJob's plan (tfjob.py) and
the TrainJob's (trainjob.py); pure: no engine, no files.
"""

from __future__ import annotations

import re

from tflab.core import cluster
from tflab.core import task as task_contract
from tflab.core.grammars import MEMORY_FACTORS as DOCKER_MEMORY_FACTORS
from tflab.core.grammars import MIN_MEMORY_BYTES
from tflab.core.settings import MIN_CPUS
from tflab.k8s import manifest
from tflab.k8s.manifest import ManifestError, shown
from tflab.k8s.tfoperator import CONTAINER, PORT_NAME

# Where no volume may be mounted in a replayed task: the engine refuses the first two outright (a
# Docker error at start, after the run began), and a mount over the others hides the lab from its task.
KEPT_PATHS = {"/proc": "the engine keeps for itself", "/sys": "the engine keeps for itself",
              task_contract.RUN_MOUNT: "is the run folder, where every task writes its log",
              "/opt/tflab": "holds the lab's code, which every task runs",
              "/opt/tflab-hooks": "holds the lab's hooks, which the replay puts in every replica"}
CONFIG_MAPS = "configmaps"  # volumes/configmaps/<name>/: so no claim may take this name
HOOKS = "tflab-hooks"  # volumes/tflab-hooks/: the lab's hooks in each replica (replay/volumes.py)
CPU = re.compile(r"([0-9]+(?:\.[0-9]+)?)(m?)")
MEMORY = re.compile(r"([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
BINARY_MEMORY_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
MEMORY_FACTORS: dict[str | None, int] = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
MEMORY_FACTORS.update(BINARY_MEMORY_UNITS.items())
# MEMORY's units as Kubernetes writes them: Docker's 512m is 512 MiB; Kubernetes' 512m is 0.512 bytes.
MEMORY_UNITS = {docker: unit for docker, factor in DOCKER_MEMORY_FACTORS.items()
                for unit, same in BINARY_MEMORY_UNITS.items() if factor == same}
# Fields the lab applies (or maps); any other field present is listed as not applied.
APPLIED_CONTAINER = {"name", "image", "command", "args", "env", "workingDir", "resources", "ports",
                     "volumeMounts", "securityContext"}
APPLIED_POD = {"containers", "volumes", "securityContext", "restartPolicy"}
# A port's name and number are read (tf-grpc's is the task's port) or, as on Kubernetes, informational;
# hostPort and hostIP would publish it on the node, which the replay never does.
APPLIED_PORT = {"name", "containerPort", "protocol"}
APPLIED_SECURITY = {"runAsUser", "runAsGroup", "readOnlyRootFilesystem", "runAsNonRoot",
                    "allowPrivilegeEscalation", "capabilities", "seccompProfile"}
MAX_ID = 2**31 - 1  # the API server's bound on runAsUser and runAsGroup


def field_of(obj: dict, key: str, kind, where: str, default=None):
    """obj[key] (`default` where it is absent), refused in one line unless it is of `kind`."""
    value = obj.get(key, default)
    if value is default:
        return value
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        name = {str: "a string", int: "an integer", list: "a list", dict: "a mapping", bool: "true or false"}
        raise ManifestError(f"{where}.{key} is {shown(value)}, expected {name.get(kind, kind)}")
    return value


def _strings(obj: dict, key: str, where: str) -> list[str] | None:
    values = field_of(obj, key, list, where)
    if values is not None and not all(isinstance(v, str) for v in values):
        raise ManifestError(f"{where}.{key} must be a list of strings")
    return values


def unapplied(obj: dict, applied: set[str], where: str) -> list[str]:
    """obj's fields that the lab does not apply, each named by its path, for the run to say so."""
    return [manifest.joined(where, key) for key in obj if key not in applied]


def cpus_of(quantity, where: str) -> float:
    match = CPU.fullmatch(str(quantity))
    if not match:
        raise ManifestError(f"{where} is {shown(quantity)}, expected a CPU quantity such as 500m or 2")
    value = float(match.group(1)) / (1000 if match.group(2) else 1)
    if value < MIN_CPUS:
        raise ManifestError(f"{where} is {quantity!r}: Docker's least CPU limit is {MIN_CPUS * 1000:g}m")
    return value


def memory_of(quantity, where: str) -> int:
    match = MEMORY.fullmatch(str(quantity))
    if not match:
        raise ManifestError(f"{where} is {shown(quantity)}, expected a memory quantity such as 512Mi or 2Gi")
    value = int(match.group(1)) * MEMORY_FACTORS[match.group(2)]
    if value > 2**50:  # a petabyte: beyond any engine, and Docker's limit is an int64
        raise ManifestError(f"{where} is {shown(quantity)}: more memory than any engine has")
    if value < MIN_MEMORY_BYTES:
        raise ManifestError(f"{where} is {quantity!r}: Docker's least memory limit is {MIN_MEMORY_BYTES // 2**20}Mi")
    return value


def memory_quantity(memory: str) -> str:
    """A MEMORY setting other than 0 (512m, Docker's) as a Kubernetes quantity (512Mi)."""
    return memory[:-1] + MEMORY_UNITS[memory[-1]]


def port_of(pod: dict, where: str) -> int:
    container = tensorflow_container(pod, where)
    for port in container.get("ports") or []:
        if isinstance(port, dict) and port.get("name") == PORT_NAME:
            value = port.get("containerPort")
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
                raise ManifestError(f"{where}.containers[{CONTAINER}].ports[{PORT_NAME}].containerPort is "
                                    f"{value!r}, expected a port number")
            return value
    return cluster.PORT


WHY_TENSORFLOW = "the one the operator gives TF_CONFIG, and the one the lab runs"


def tensorflow_container(pod: dict, where: str, name: str = CONTAINER, why: str = WHY_TENSORFLOW) -> dict:
    containers = field_of(pod, "containers", list, where) or []
    found = [c for c in containers if isinstance(c, dict) and c.get("name") == name]
    if not found:
        raise ManifestError(f"{where}.containers has no container named {name} ({why})")
    return found[0]


def service_of(pod: dict, where: str, config_maps: dict, name: str = CONTAINER,
               why: str = WHY_TENSORFLOW) -> tuple[dict, dict, list[str]]:
    """One replica type's Compose service (less TF_CONFIG, hostname and network), the volumes it
    needs, and the fields it does not apply; `name` is the container the lab runs (a TrainJob's is
    `node`). The schema has passed; what is checked here is what the API server and the kubelet
    check beyond it, and what Docker cannot take, in this order: the container's process, its
    limits, its securityContext, the pod's volumes, then each mount."""
    container = tensorflow_container(pod, where, name, why)
    at = f"{where}.containers[{name}]"
    extra = pod_unapplied(pod, container, where, at)
    service = process_of(container, at, config_maps)
    extra += limits_of(container, at, service)
    extra += security_of(pod, container, where, at, service)
    volumes, mounts, tmpfs = mounts_of(container, at, volumes_by_name(pod, where), where, config_maps)
    service["x-mounts"] = mounts
    if tmpfs:
        service["tmpfs"] = tmpfs
    return service, volumes, extra


def pod_unapplied(pod: dict, container: dict, where: str, at: str) -> list[str]:
    """The pod's and the container's fields the lab does not apply, its other containers (sidecars)
    and its ports' unapplied fields; refuses `ports` that is no list."""
    extra = unapplied(pod, APPLIED_POD, where) + unapplied(container, APPLIED_CONTAINER, at)
    extra += [f"{where}.containers[{manifest.key_text(c.get('name'))}] (a sidecar)" for c in pod["containers"]
              if isinstance(c, dict) and c is not container]
    for number, port in enumerate(field_of(container, "ports", list, at, [])):
        extra += unapplied(port, APPLIED_PORT, f"{at}.ports[{number}]") if isinstance(port, dict) else []
    return extra


def process_of(container: dict, at: str, config_maps: dict) -> dict:
    """The service's process: the container's image, command, args, workingDir and env, under the
    lab's hardening. Refuses a missing or malformed image, command or args that are no list of
    strings, a relative workingDir, and an env entry env_entry refuses."""
    image = field_of(container, "image", str, at)
    if not image:
        raise ManifestError(f"{at}.image is missing")
    manifest.image_reference(image, f"{at}.image")
    service: dict = {"image": image, "init": True, "cap_drop": ["ALL"],
                     "security_opt": ["no-new-privileges:true"], "environment": {}}
    command, args = _strings(container, "command", at), _strings(container, "args", at)
    if command is not None:  # Kubernetes' command is Docker's entrypoint, and it drops the image's CMD
        service["entrypoint"] = command
        service["command"] = args or []
    elif args is not None:
        service["command"] = args
    working_dir = field_of(container, "workingDir", str, at)
    if working_dir:
        service["working_dir"] = manifest.absolute_path(working_dir, f"{at}.workingDir")
    for number, entry in enumerate(field_of(container, "env", list, at, [])):
        service["environment"].update([env_entry(entry, f"{at}.env[{number}]", config_maps)])
    return service


def limits_of(container: dict, at: str, service: dict) -> list[str]:
    """resources.limits' cpu and memory into `service`; returns the resources' other fields
    (requests, other limits), not applied. Refuses a quantity Docker cannot take (cpus_of, memory_of)."""
    resources = field_of(container, "resources", dict, at, {})
    extra = unapplied(resources, {"limits"}, f"{at}.resources")
    limits = field_of(resources, "limits", dict, f"{at}.resources", {})
    extra += unapplied(limits, {"cpu", "memory"}, f"{at}.resources.limits")
    if "cpu" in limits:
        service["cpus"] = cpus_of(limits["cpu"], f"{at}.resources.limits.cpu")
    if "memory" in limits:
        service["mem_limit"] = memory_of(limits["memory"], f"{at}.resources.limits.memory")
    return extra


def security_of(pod: dict, container: dict, where: str, at: str, service: dict) -> list[str]:
    """The pod's securityContext overlaid by the container's into `service` (user, read_only,
    x-non-root); returns their fields not applied, and runAsGroup without runAsUser. Refuses an id
    out of the API server's range, and runAsNonRoot with runAsUser 0, as the kubelet does."""
    pod_security = field_of(pod, "securityContext", dict, where, {})
    extra = [manifest.joined(f"{where}.securityContext", key) for key in pod_security if key not in APPLIED_SECURITY]
    extra += [manifest.joined(f"{at}.securityContext", key)
              for key in field_of(container, "securityContext", dict, at, {}) if key not in APPLIED_SECURITY]
    security = {**pod_security, **container["securityContext"]} if "securityContext" in container else pod_security
    for key in ("runAsUser", "runAsGroup"):
        value = security.get(key)
        if value is not None and not 0 <= value <= MAX_ID:
            raise ManifestError(f"{at}.securityContext.{key} is {value}, expected 0..{MAX_ID}")
    if "runAsUser" in security:
        user = field_of(security, "runAsUser", int, f"{at}.securityContext")
        group = field_of(security, "runAsGroup", int, f"{at}.securityContext", user)
        service["user"] = f"{user}:{group}"
    elif "runAsGroup" in security:
        extra.append(f"{at}.securityContext.runAsGroup without runAsUser")
    # The kubelet refuses to start a container that would run as root under runAsNonRoot: here
    # where runAsUser says so, and at the image check where the image's own user decides.
    if security.get("runAsNonRoot") is True and security.get("runAsUser") == 0:
        raise ManifestError(f"{at}.securityContext has runAsNonRoot: true and runAsUser: 0 (root); the kubelet "
                            "refuses it: give a non-zero runAsUser, or drop runAsNonRoot")
    service["x-non-root"] = security.get("runAsNonRoot") is True and "runAsUser" not in security
    if security.get("readOnlyRootFilesystem") is True:
        service["read_only"] = True
    return extra


def volumes_by_name(pod: dict, where: str) -> dict[str, tuple[dict, str]]:
    """The pod's volumes by name, each with where it is written; refuses a name that is no DNS-1123
    label, and one that names two volumes."""
    by_name: dict[str, tuple[dict, str]] = {}
    for number, volume in enumerate(field_of(pod, "volumes", list, where, [])):
        vwhere = f"{where}.volumes[{number}]"
        manifest.dns1123_label(volume.get("name"), f"{vwhere}.name")
        if volume["name"] in by_name:
            raise ManifestError(f"{vwhere}.name {volume['name']} names two volumes; each must be unique")
        by_name[volume["name"]] = (volume, vwhere)
    return by_name


def mounts_of(container: dict, at: str, by_name: dict[str, tuple[dict, str]], where: str,
              config_maps: dict) -> tuple[dict[str, dict], list[tuple[str, str, bool]], list[str]]:
    """The container's volumeMounts, in order: the folders of volumes/ they need (claim_folder),
    the bind mounts (folder, target, read-only) and the tmpfs mounts (emptyDir). Refuses a mount at
    a path mount_target refuses, a subPath, a name no volume has, and a volume of another kind
    than emptyDir, configMap and persistentVolumeClaim."""
    volumes: dict[str, dict] = {}  # folder of volumes/ -> what it holds (claim_folder)
    mounts, tmpfs = [], []
    targets: dict[str, str] = {}  # mountPath -> the mount that takes it
    for number, mount in enumerate(field_of(container, "volumeMounts", list, at, [])):
        mwhere = f"{at}.volumeMounts[{number}]"
        target = mount_target(mount, mwhere, targets)
        targets[target] = f"volumeMounts[{number}]"
        if mount.get("subPath") or mount.get("subPathExpr"):
            raise ManifestError(f"{mwhere}.subPath is not supported; expected whole volumes")
        if mount.get("name") not in by_name:
            raise ManifestError(f"{mwhere}.name {shown(mount.get('name'))} is no volume of {where}.volumes")
        volume, vwhere = by_name[mount["name"]]
        read_only = mount.get("readOnly") is True
        if volume.get("emptyDir") is not None:
            size = volume["emptyDir"].get("sizeLimit")
            tmpfs.append(target + (f":size={memory_of(size, vwhere + '.emptyDir.sizeLimit')}" if size else ""))
        elif volume.get("configMap") is not None:
            folder, view = config_map_view(volume, vwhere, config_maps)
            claim_folder(volumes, folder, view, where)
            mounts.append((folder, target, True))
        elif volume.get("persistentVolumeClaim") is not None:
            claim = claim_of(volume, vwhere)
            claim_folder(volumes, claim, {"claim": claim}, where)
            # the kubelet mounts it read-only where either the mount or the volume source says so
            mounts.append((claim, target, read_only or volume["persistentVolumeClaim"].get("readOnly") is True))
        else:
            kinds = sorted(manifest.key_text(kind) for kind in set(volume) - {"name"})
            raise ManifestError(f"{vwhere} is a {'/'.join(kinds) or 'typeless'} volume; the lab runs configMap, "
                                "emptyDir and persistentVolumeClaim volumes (a folder of this host: make it a "
                                "persistentVolumeClaim and give it the folder with CLAIMS=<claim>=/host/folder)")
    return volumes, mounts, tmpfs


def mount_target(mount: dict, mwhere: str, targets: dict[str, str]) -> str:
    """A mount's mountPath; refuses one that is not absolute, the root, one over or in a path the
    engine or the lab keeps (KEPT_PATHS), and one that an earlier mount (`targets`) takes."""
    target = manifest.absolute_path(mount.get("mountPath"), f"{mwhere}.mountPath")
    if target == "/":
        raise ManifestError(f"{mwhere}.mountPath is \"/\", expected a folder below the container's root")
    kept = next((path for path in KEPT_PATHS if target == path or target.startswith(path + "/")
                 or path.startswith(target + "/")), None)
    if kept:
        raise ManifestError(f"{mwhere}.mountPath {target} would cover or lie in {kept}, which "
                            f"{KEPT_PATHS[kept]}; expected a folder elsewhere")
    if target in targets:
        raise ManifestError(f"{mwhere}.mountPath {target} is also {targets[target]}'s; one mount a path")
    return target


def config_map_view(volume: dict, vwhere: str, config_maps: dict) -> tuple[str, dict]:
    """A configMap volume's view (the map, and its chosen items or None for all) and the folder of
    volumes/ that holds it: configmaps/<map> for the whole map, configmaps/<map>-<volume> for chosen
    items. Refuses a map not in the file, an item's key not in the map, an item's path that is not
    relative, and two items' paths that clash."""
    source = volume["configMap"]
    map_name = source.get("name")
    if map_name not in config_maps:
        raise ManifestError(f"{vwhere}.configMap.name {shown(map_name)} is no ConfigMap of the same file")
    items = source.get("items")
    data = config_maps[map_name]
    paths = []
    for index, item in enumerate(items or []):
        if item.get("key") not in data:
            raise ManifestError(f"{vwhere}.configMap.items[{index}].key {shown(item.get('key'))} is no key "
                                f"of ConfigMap {map_name}")
        paths.append(manifest.relative_path(item.get("path"), f"{vwhere}.configMap.items[{index}].path"))
    for index, path in enumerate(paths):  # a file each: none twice, none a folder of another
        if path in paths[:index] or any(other.startswith(path + "/") or path.startswith(other + "/")
                                        for other in paths[:index]):
            raise ManifestError(f"{vwhere}.configMap.items[{index}].path {path} clashes with another item's")
    folder = map_name if items is None else f"{map_name}-{volume['name']}"
    return f"{CONFIG_MAPS}/{folder}", {"configMap": map_name, "items": items}


def claim_of(volume: dict, vwhere: str) -> str:
    """A persistentVolumeClaim volume's claimName, the folder of volumes/ it mounts; refuses one
    that is no DNS-1123 subdomain, and the names of the lab's own folders there."""
    claim = manifest.dns1123_subdomain(volume["persistentVolumeClaim"].get("claimName"),
                                       f"{vwhere}.persistentVolumeClaim.claimName")
    if claim in (CONFIG_MAPS, HOOKS):
        raise ManifestError(f"{vwhere}.persistentVolumeClaim.claimName {claim} is the lab's folder for "
                            f"{'ConfigMaps' if claim == CONFIG_MAPS else 'its hooks'}; give the claim "
                            "another name")
    return claim


def hooks_file(task: str, name: str) -> str:
    """A file of a replica's own hooks folder, relative to the run folder: read from its handle
    (beneath), no link followed, as every file a task may write."""
    return f"volumes/{HOOKS}/{task}/{name}"


def claim_folder(volumes: dict, folder: str, volume: dict, where: str) -> None:
    """One folder of volumes/ for each claim and each view of a ConfigMap, whoever mounts it."""
    if volumes.setdefault(folder, volume) != volume:
        raise ManifestError(f"{where}.volumes: volumes/{folder} would hold two different things (a ConfigMap named "
                            "<map>-<volume> and another map's items, or one map's items that differ by replica "
                            "type); rename a volume or a ConfigMap")


def env_entry(entry, where: str, config_maps: dict) -> tuple[str, str]:
    name = manifest.env_name(entry.get("name"), f"{where}.name")
    if "valueFrom" not in entry:
        value = entry.get("value") or ""
        return name, value
    source = entry["valueFrom"]
    reference = source.get("configMapKeyRef")
    if not isinstance(reference, dict):
        kinds = ", ".join(manifest.key_text(kind) for kind in source) or "(empty)"
        raise ManifestError(f"{where}.valueFrom.{kinds} is not supported; expected configMapKeyRef (from a "
                            "ConfigMap in the same file)")
    data = config_maps.get(reference.get("name"))
    if data is None or reference.get("key") not in data:
        if reference.get("optional") is True:
            return name, ""
        raise ManifestError(f"{where}.valueFrom.configMapKeyRef: ConfigMap {shown(reference.get('name'))} key "
                            f"{shown(reference.get('key'))} is not in the same file")
    return name, data[reference["key"]]
