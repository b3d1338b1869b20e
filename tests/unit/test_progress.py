"""The first build is never silent: each wheel and each build step is a line, and a long step a heartbeat."""

import sys

from tflab.images import progress


def test_build_steps_of_either_builder_become_lines():
    assert progress.build_step("Step 3/14 : RUN python3 -m venv /opt/venv") == \
        "step 3/14: RUN python3 -m venv /opt/venv"
    assert progress.build_step("#7 [packages 3/5] RUN python3 -m venv /opt/venv") == \
        "packages step 3/5: RUN python3 -m venv /opt/venv"
    assert progress.build_step("#9 [2/2] COPY x y") == "step 2/2: COPY x y"
    assert progress.build_step(" ---> Using cache") is None
    assert progress.build_step("#7 sha256:abc 10.5MB / 274MB 3.1s") is None


def test_wheels_are_counted_with_their_megabytes():
    count = progress.WheelCounter(expected=3)
    assert count("Collecting tensorflow-cpu==2.21.0") is None
    assert count("  Downloading tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl (274.3 MB)") == \
        "wheel 1 of 3: tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl (274.3 MB; 274 MB so far)"
    assert count("  Downloading six-1.16.0-py2.py3-none-any.whl (11 kB)").endswith("(0.0 MB; 274 MB so far)")
    assert count("  File was already downloaded /w/numpy-2.1.0-cp311.whl") == \
        "wheel 3 of 3: numpy-2.1.0-cp311.whl (already here)"


def test_a_long_quiet_step_gets_a_heartbeat_and_a_failure_keeps_the_tail(monkeypatch):
    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 1)
    said = []
    script = ("import time; print('Step 1/2 : RUN slow', flush=True); time.sleep(2.5); print('boom'); "
              "raise SystemExit(3)")
    code, tail = progress.run_summarised([sys.executable, "-c", script], progress.build_step, said.append, "building x")
    assert code == 3 and tail.endswith("boom\n")
    assert said[0].startswith("building x: step 1/2: RUN slow (")
    assert any(line.startswith("building x: still at step 1/2: RUN slow (") for line in said[1:]), said


def test_quick_steps_are_not_news(monkeypatch):
    said = []
    script = ("import time; print('Step 1/3 : ARG x'); print('Step 2/3 : COPY a b', flush=True); time.sleep(1.5); "
              "print('Step 3/3 : CMD y')")
    code, _ = progress.run_summarised([sys.executable, "-c", script], progress.build_step, said.append, "b",
                                      quiet_below=1)
    assert code == 0 and [line.split(" (")[0] for line in said] == ["b: step 2/3: COPY a b"], said
