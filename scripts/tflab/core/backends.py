"""What each BACKEND can do, as data: its name and capabilities, declared once, in `TABLE`.

Settings' validation, the faults' checks, the replay's and the audit's read it rather than
comparing BACKEND with a name; `backends.REGISTRY` gives each entry its construction (host side).
It lives in core/ because the trainer and settings' validation read it too, so it imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """One backend: what the lab may ask of it. A setting or command that needs what it lacks is
    refused in one line before anything is written or started."""
    name: str  # BACKEND=<name>
    containers: bool  # its tasks are containers: PLATFORM picks their image, make chaos acts on them
    gpus: bool  # GPUS=: the lab hands GPUs to its containers
    image_versions: bool  # TF= and KERAS=: the TensorFlow version is an image built for the run
    link: bool  # LINK= and SCENARIO=slow-link: the delay proxies are Compose services
    notice_gce: bool  # NOTICE=gce: the metadata stand-in is a service of the run's Compose project
    replay: bool  # TFJOB= and TRAINJOB=: the replay runs every replica as a container on it
    shared_files: bool  # every path a task writes is seen by every task (processes of one machine)
    # Which SCENARIOs make chaos offers on it is each fault's to say (faults/<scenario>.py's
    # `backends`): a new fault is one file, and it names where it was tried.


COMPOSE = Capabilities("compose", containers=True, gpus=True, image_versions=True, link=True, notice_gce=True,
                       replay=True, shared_files=False)
LOCAL = Capabilities("local", containers=False, gpus=False, image_versions=False, link=False, notice_gce=False,
                     replay=False, shared_files=True)
SWARM = Capabilities("swarm", containers=True, gpus=False, image_versions=False, link=False, notice_gce=False,
                     replay=False, shared_files=False)

TABLE = (COMPOSE, LOCAL, SWARM)  # a new backend: its entry here, and its Kind in backends.REGISTRY
BACKENDS = tuple(entry.name for entry in TABLE)
_BY_NAME = {entry.name: entry for entry in TABLE}


def capabilities(name: str) -> Capabilities:
    """BACKEND=name's entry; name is one of BACKENDS (settings' parser has refused any other)."""
    return _BY_NAME[name]


def those_with(capability: str) -> str:
    """The backends that have a capability, as a refusal's "expected BACKEND=..." names them."""
    return " or ".join(entry.name for entry in TABLE if getattr(entry, capability))


def replays_on(name: str) -> bool:
    """Whether TFJOB= or TRAINJOB= can replay on BACKEND=name, read before settings are parsed (so
    name may be any word: a word that names no backend replays on nothing)."""
    return name in _BY_NAME and _BY_NAME[name].replay
