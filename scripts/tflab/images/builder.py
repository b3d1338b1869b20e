"""How an image is built on this engine: the builder, the build context, and what a build leaves.

- Two ways: `docker build` of a Dockerfile (the code image, a user script's packages), or a
  container of the base that installs from a folder mounted read-only and is then committed (the
  packages image: no Dockerfile step can read a mounted folder on the legacy builder, and copying
  the wheels in, or the installed packages across stages, costs minutes).

- Builder: BuildKit where the Docker CLI has it (`docker buildx`, on every current Docker), else
  the legacy builder (Docker 20.10's CLI, or a CLI without buildx, as on this lab's development
  machine). Both read the same Dockerfiles: they use nothing BuildKit alone has.
- Context: each build gets a folder of its own holding only what that build copies (hard links,
  so the 334 MB of wheels are never copied on disk), not the repository: the legacy builder sends
  its whole context to the engine on every build, BuildKit only what COPY names.
- Leftovers: the legacy builder keeps the last image of every stage but the final one as an
  untagged image (a multi-stage build's `install` stage: 2.1 GB of wheels and packages), and the
  images of a failed build's finished steps. The build's own output says which images it made
  (" ---> <id>" after each step it did not take from cache), and those are removed once it ends;
  images it took from cache belong to an earlier build, another checkout's maybe, and are kept.
  BuildKit makes no intermediate images at all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from tflab.engine import docker
from tflab.images import progress

STEP = re.compile(r"^Step \d+/\d+ : (\S+)")
IMAGE = re.compile(r"^---> ([0-9a-f]{12,64})$")  # as run_summarised hands it: stripped
BUILT = re.compile(r"^Successfully built ([0-9a-f]{12,64})$")


def buildkit() -> bool:
    """Whether `docker build` can use BuildKit here: the CLI has the buildx plugin. Engines since
    18.09 serve it; only the CLI may lack it (Debian's docker.io 20.10 has no buildx)."""
    try:
        return docker.buildx_available()
    except subprocess.TimeoutExpired:
        return False


def build_command(dockerfile: Path, context: Path, iidfile: Path, build_args: dict[str, str], platform: str = "",
                  use_buildkit: bool = False) -> list[str]:
    """`docker build` for either builder, untagged, its image's id into `iidfile` (run_build tags
    it). BuildKit: plain progress (one line per step, which progress.build_step reads) and --load,
    so that a builder other than the engine's own still leaves the image on the engine. Legacy:
    --force-rm, so a failed step's container goes too."""
    args = [arg for name, value in build_args.items() for arg in ("--build-arg", f"{name}={value}")]
    own = ["--progress=plain", "--load"] if use_buildkit else ["--force-rm"]
    return docker.build_command(str(dockerfile), str(context), str(iidfile), platform, args, own)


def build_environment(use_buildkit: bool) -> dict[str, str]:
    """DOCKER_BUILDKIT said either way: a 20.10 CLI defaults to the legacy builder even where buildx
    is installed, and a current one refuses DOCKER_BUILDKIT=1 without buildx."""
    return {**os.environ, "DOCKER_BUILDKIT": "1" if use_buildkit else "0"}


@dataclass
class LegacyOutput:
    """Reads the legacy builder's output as it comes: the progress line for each step, and the
    images the build made itself, the last one of each stage, which are what it leaves behind."""

    stage_images: list[str] = field(default_factory=list)  # per stage, the newest image this build made
    final: str = ""
    _cached: bool = False
    _from: bool = False

    def __call__(self, line: str) -> str | None:
        step = STEP.match(line)
        if step:
            self._from = step.group(1).upper() == "FROM"
            if self._from:
                self.stage_images.append("")
            self._cached = False
        elif line == "---> Using cache":
            self._cached = True
        elif (image := IMAGE.match(line)) and self.stage_images:
            if not self._cached and not self._from:  # a FROM's image is the base: never ours
                self.stage_images[-1] = image.group(1)
            self._cached = self._from = False
        built = BUILT.match(line)
        if built:
            self.final = built.group(1)
        return progress.build_step(line)

    def leftovers(self) -> list[str]:
        """The images to remove once the build ended: every stage's own newest image but the
        image built (removing one removes the untagged steps under it that nothing else uses)."""
        return [image for image in self.stage_images if image and not self.final.startswith(image)]


# How long an interrupted legacy build is let finish. The engine goes on with a build whose client
# went and writes its image, untagged, after the lab's cleanup has looked: the code layer's came
# 10-20 s after a Ctrl-C (issue 56, 2 of 2 tries), a build of one COPY on a busy 2-core host.
INTERRUPTED_FINISH_SECONDS = 60


def run_build(command: list[str], what: str, say: Callable[[str], None], use_buildkit: bool,
              quiet_below: float = 0, parent: str = "", tag: str = "", iidfile: Path | None = None) -> tuple[int, str]:
    """Runs a `docker build` with a line per step and a heartbeat (progress.run_summarised), then
    removes the intermediate images the legacy builder left and, where it succeeded, tags the image
    it wrote to `iidfile` as `tag`; returns (exit code, output's tail). Interrupted (Ctrl-C,
    SIGTERM), a legacy build is let finish for INTERRUPTED_FINISH_SECONDS, since the engine
    finishes it whatever its client does, and the images its output named are removed, its own
    image included, never tagged: what this build made and nothing another build made. Where it
    did not finish (BuildKit's, which ends with its client; a legacy one past the bound or
    interrupted twice), the images its output named are removed, and the untagged images on
    `parent` (the image it builds FROM) made since it started. Left, such an image has no name
    `make clean` knows and blocks removing its parent."""
    output = LegacyOutput()
    started = time.time()
    finished = False
    try:
        # Legacy: interrupted, the client is let finish (the engine finishes the build anyway), so that its
        # output names the image it made; BuildKit ends a build whose client went, and makes no leftovers.
        code, tail = progress.run_summarised(command, progress.build_step if use_buildkit else output, say, what,
                                             quiet_below=quiet_below, env=build_environment(use_buildkit),
                                             finish_seconds=0 if use_buildkit else INTERRUPTED_FINISH_SECONDS)
        finished = True
    finally:
        if finished:
            for image in output.leftovers():
                docker.image_remove(image)
        elif output.final:  # interrupted, and the build finished: what it made, named, and nothing else
            for image in [output.final, *output.leftovers()]:
                docker.image_remove(image)
        else:
            remove_interrupted(output.leftovers(), parent, started - 1)
    if code == 0 and tag and iidfile is not None:
        code, said = tag_built(iidfile, tag)
        tail += said
    return code, tail


def tag_built(iidfile: Path, tag: str) -> tuple[int, str]:
    """Tags the image a finished build wrote the id of; (exit code, what went wrong)."""
    try:
        image = iidfile.read_text().strip()
    except OSError as error:
        return 1, f"\nthe build wrote no image id ({iidfile}: {error.strerror or error})"
    tagged = docker.tag(image, tag)
    return tagged.returncode, tagged.stdout + tagged.stderr


INTERRUPTED_CLEANUP_SECONDS = 20  # the engine removes an interrupted step's container in its own time


def remove_interrupted(named: list[str], parent: str, since: float) -> None:
    """Removes what an interrupted build made. The engine ends the step that was running when the
    build's client went, and until it has removed that step's container, the image under it cannot
    be removed ("image is being used by running container"): so again, for a few seconds."""
    deadline = time.monotonic() + INTERRUPTED_CLEANUP_SECONDS
    while True:
        left = [image for image in named if docker.image_remove(image).returncode != 0
                and docker.image_inspect(image).returncode == 0]
        if parent:
            remove_untagged_children(parent, since)
            left += untagged_children(parent, since)
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.5)


def untagged_children(parent: str, since: float | None = None) -> list[str]:
    """The untagged images built on `parent` (a name or id), directly or through other untagged
    ones, created since `since` (unix time) where given: a legacy build's intermediate images."""
    parent_id = docker.image_inspect(parent, "{{.Id}}").stdout.strip()
    if not parent_id:
        return []
    ids = docker.dangling_images(all_layers=True)
    found = docker.images_inspect(ids, "{{.Id}} {{.Parent}} {{.Created}}")
    parents = {}
    for line in found.splitlines():
        image, _, rest = line.partition(" ")
        image_parent, _, created = rest.partition(" ")
        if since is None or created_at(created) >= since:
            parents[image] = image_parent
    ours, grew = [], True
    while grew:  # children first found, then their children
        grew = False
        for image, image_parent in parents.items():
            if image not in ours and (image_parent == parent_id or image_parent in ours):
                ours.append(image)
                grew = True
    return ours


def remove_untagged_children(parent: str, since: float | None = None) -> list[str]:
    """Removes untagged_children(parent, since), the newest first; returns those removed."""
    removed = []
    for image in reversed(untagged_children(parent, since)):
        if docker.image_remove(image, timeout=120).returncode == 0:
            removed.append(image)
    return removed


def created_at(stamp: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, Z or an offset) as unix seconds; 0 if unreadable."""
    from datetime import datetime

    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", stamp.strip())
    if not match:
        return 0.0
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(match.group(1) + zone).timestamp() + float("0" + (match.group(2) or ""))


@dataclass(frozen=True)
class Unpacked:
    """The part of an install that a container of the engine's own platform does for an emulated
    one: `command` runs in a container of `base` (the same folder mounted), and what it leaves at
    `path` is copied into the emulated container before that starts."""

    base: str
    command: list[str]
    path: str


def install_and_commit(base: str, folder: Path, mounted_at: str, command: list[str], tag: str, changes: list[str],
                       label: str, what: str, say: Callable[[str], None], summarise: Callable[[str], str | None],
                       platform: str = "", unpacked: Unpacked | None = None) -> tuple[int, str]:
    """Runs `command` as root in a container of `base`, with `folder` mounted read-only at
    `mounted_at` and no network, and commits the container as `tag` with `changes` (Dockerfile
    instructions: ENV, USER, CMD ...); with `unpacked`, that container first gets what a native
    one made. The containers go whatever happens, an interruption included. Returns (exit code,
    output's tail)."""
    name = f"tflab-build-{uuid.uuid4().hex[:12]}"
    options = ["--label", label, "--network", "none", "--user", "0:0", "--volume", f"{folder}:{mounted_at}:ro"]
    created = docker.create(name, base, command, [*(["--platform", platform] if platform else []), *options])
    if created.returncode != 0:
        return created.returncode, created.stdout + created.stderr
    native = f"{name}-native"
    try:
        tail = ""
        if unpacked is not None:
            made = docker.create(native, unpacked.base, unpacked.command, options)
            if made.returncode != 0:
                return made.returncode, made.stdout + made.stderr
            code, tail = progress.run_summarised(docker.start_attached_command(native), summarise, say, what,
                                                 quiet_below=3)
            if code != 0:
                return code, tail
            say(f"{what}: copying the packages into the {platform or 'image'} container")
            copied = docker.copy_between(native, unpacked.path, name, str(Path(unpacked.path).parent))
            docker.remove_containers(native, timeout=120)
            if copied.returncode != 0:
                return copied.returncode, tail + copied.stderr
        code, more = progress.run_summarised(docker.start_attached_command(name), summarise, say, what,
                                             quiet_below=3)
        tail += more
        if code != 0:
            return code, tail
        say(f"{what}: committing the packages as an image")
        committed = docker.commit(name, tag, changes, timeout=1800)
        return committed.returncode, tail + committed.stdout + committed.stderr
    finally:
        docker.remove_containers(name, *([native] if unpacked is not None else []), timeout=120)


def place(source: Path, target: Path) -> None:
    """A hard link where the file system allows one, else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@contextmanager
def context(beside: Path, files: dict[str, Path]) -> Iterator[Path]:
    """A build context holding only `files` ({name in the context: source}), a folder with every
    file under it for a directory source, laid out in a scratch folder next to `beside` (the same
    file system as the wheels, so they are hard-linked) and removed afterwards."""
    beside.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".context-", dir=beside) as scratch:
        root = Path(scratch)
        for name, source in files.items():
            if source.is_dir():
                for path in sorted(source.rglob("*")):
                    if path.is_file() and "__pycache__" not in path.parts and not path.name.startswith("."):
                        place(path, root / name / path.relative_to(source))
                (root / name).mkdir(parents=True, exist_ok=True)
            else:
                place(source, root / name)
        yield root


def context_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())
