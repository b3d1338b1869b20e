"""A hostile task: what a pull request's script could try on a host that runs the lab as root
(issue 34). It plants a link to a root-only host file (HOSTILE_TARGET, named by the test as an
attacker would guess one) at every name of the run folder it can reach, tries the lab's records,
and keeps swapping its own log between a file and a link while the lab reads; and it leaves set-ID
copies of the shell and set-group-ID folders where a host user might run them (issue 41). It needs no
TensorFlow; it exits 0, so the run itself is `ok` unless the lab is fooled."""

import os
import shutil
import threading
import time

target = os.environ["HOSTILE_TARGET"]
space = os.environ["TFLAB_OUTPUT"]  # the tasks' space: all of the run folder a task can write
task = os.environ["TFLAB_TASK"]
NAMES = [f"{peer}.{kind}" for peer in ("worker-0", "worker-1") for kind in ("jsonl", "out")] + [
    "model.keras", "backup", "work", "output.log", "summary.json", "owner.json", "chaos.jsonl", "ended-by-down",
    "config.json", "links", "metadata", "compose.run.json", "tasks", "report.md", "report.png"]


def plant(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rename(path, f"{path}.moved-{task}")
        else:
            os.unlink(path)
    except OSError:
        pass
    try:
        os.symlink(target, path)
    except OSError:
        pass


# Under make chaos (HOSTILE_SECONDS) it spares the tasks' logs, so the lab sees them start and acts
# (posts a GCE notice, appends its chaos events, restarts): what it writes then is what is tested.
SECONDS = float(os.environ.get("HOSTILE_SECONDS", "0"))
if SECONDS:
    NAMES = [name for name in NAMES if not name.endswith(".jsonl")]
# Each peer's launcher makes its working folder, work/<task>, before the script runs: planting a link
# at `work` before a slower peer's launcher got there (a start skew on a busy machine) failed that
# peer at its start, a failure of the test's, not the lab's. So the planting waits for every peer's.
# (Not under make chaos, whose restarted tasks find `work` planted already.)
work = os.path.join(space, "work")
peers = [os.path.join(work, peer) for peer in ("worker-0", "worker-1")]
started = time.monotonic()
while not SECONDS and not all(os.path.isdir(peer) for peer in peers) and time.monotonic() - started < 240 \
        and os.path.isdir(work) and not os.path.islink(work):
    time.sleep(0.1)
for name in NAMES:
    plant(os.path.join(space, name))
for folder in ("links", "metadata", "volumes"):  # folders the lab might make, each full of links
    os.makedirs(os.path.join(space, f"{folder}-{task}"), exist_ok=True)
    plant(os.path.join(space, f"{folder}-{task}", f"{task}.json"))

# Issue 56: first a chain of folders deeper than the set-ID walk's bound (64), a set-user-ID shell at
# its bottom: the walk once stopped there, and every set-ID program listed after it kept its bit.
deep = os.path.join(space, f"deep-{task}", *(f"d{level}" for level in range(70)))
os.makedirs(deep, exist_ok=True)
shutil.copyfile("/bin/sh", os.path.join(deep, f"su-{task}"))
os.chmod(os.path.join(deep, f"su-{task}"), 0o4755)

# Issue 41: set-ID programs where a host user might run them, as the task's own user (1000): a
# set-user-ID and a set-group-ID copy of the shell and a set-group-ID folder, in the tasks' space
# and in the task's working folder.
SETID = []
for folder in (space, os.getcwd()):
    for name, mode in ((f"su-{task}", 0o4755), (f"sg-{task}", 0o2755)):
        path = os.path.join(folder, name)
        try:
            shutil.copyfile("/bin/sh", path)
            os.chmod(path, mode)
            SETID.append(path)
        except OSError as error:
            print(f"hostile: could not plant {path}: {error.strerror}", flush=True)
    try:
        os.makedirs(os.path.join(folder, f"sgdir-{task}"), exist_ok=True)
        os.chmod(os.path.join(folder, f"sgdir-{task}"), 0o2777)
    except OSError as error:
        print(f"hostile: could not make a set-group-ID folder: {error.strerror}", flush=True)
print(f"hostile: {task} planted {len(SETID)} set-ID programs", flush=True)

for record in ("/lab/config.json", os.path.join(space, "..", "owner.json"), os.path.join(space, "..", "summary.json"),
               os.path.join(space, "..", "output.log")):
    try:
        with open(record, "w") as file:
            file.write('{"pid": 1, "process_start": null}')
        print(f"hostile: WROTE {record}", flush=True)
    except OSError as error:
        print(f"hostile: could not write {record}: {error.strerror}", flush=True)


def race() -> None:
    log = os.path.join(space, f"{task}.jsonl")
    for _ in range(200):
        plant(log)
        time.sleep(0.005)
        try:
            os.unlink(log)
            os.mkfifo(log)
        except OSError:
            pass
        time.sleep(0.005)


if not SECONDS:
    racer = threading.Thread(target=race)
    racer.start()
    racer.join()
    plant(os.path.join(space, f"{task}.jsonl"))
print(f"hostile: {task} planted links at {len(NAMES)} names", flush=True)
# Under make chaos: keep planting while the lab posts notices, appends its events and restarts.
deadline = time.monotonic() + SECONDS
while time.monotonic() < deadline:
    for name in NAMES:
        plant(os.path.join(space, name))
    time.sleep(0.2)
