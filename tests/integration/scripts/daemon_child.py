"""A script that leaves a process behind it as a daemon does (issue 56): setsid, then a second fork,
its output closed; the grandchild writes its pid beside DAEMON_TARGET, sleeps DAEMON_SLEEP seconds,
then writes DAEMON_TARGET with mode 4755. The script itself exits 0 after DAEMON_WAIT seconds (0)."""

import os
import time

target, sleep = os.environ["DAEMON_TARGET"], float(os.environ.get("DAEMON_SLEEP", "5"))
if os.fork() == 0:
    os.setsid()  # out of the task's process group and session: a killpg of the task misses it
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open(target + ".pid", "w") as file:
            file.write(str(os.getpid()))
        time.sleep(sleep)
        with open(target, "w") as file:
            file.write("written after the run\n")
        os.chmod(target, 0o4755)
    os._exit(0)
os.wait()
print("daemon started", flush=True)
time.sleep(float(os.environ.get("DAEMON_WAIT", "0")))  # a test kills the lab meanwhile
