"""A hostile task: what a pull request's script could try on a host that runs the lab as root
(issue 34). It plants a link to a root-only host file (HOSTILE_TARGET, named by the test as an
attacker would guess one) at every name of the run folder it can reach, tries the lab's records,
and keeps swapping its own log between a file and a link while the lab reads. It needs no
TensorFlow; it exits 0, so the run itself is `ok` unless the lab is fooled."""

import os
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


for name in NAMES:
    plant(os.path.join(space, name))
for folder in ("links", "metadata", "volumes"):  # folders the lab might make, each full of links
    os.makedirs(os.path.join(space, f"{folder}-{task}"), exist_ok=True)
    plant(os.path.join(space, f"{folder}-{task}", f"{task}.json"))

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


racer = threading.Thread(target=race)
racer.start()
racer.join()
plant(os.path.join(space, f"{task}.jsonl"))
print(f"hostile: {task} planted links at {len(NAMES)} names", flush=True)
