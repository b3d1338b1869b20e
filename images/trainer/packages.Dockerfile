# The trainer image's packages: TensorFlow and all it imports, installed on the base, with the
# settings every trainer runs with. images/trainer/Dockerfile adds the lab's code on top, so a code
# change rebuilds one small layer and never this one. The lab builds it as
# tflab-trainer-packages:<variant>-<digest> from a context it lays out for the one build (hard links):
# this file, requirements.txt (the variant's pins) and wheels/ (their wheelhouse), nothing else.
# By hand, in such a folder:
#
#   docker build -f packages.Dockerfile --build-arg BASE_IMAGE=python:3.11-slim -t tflab-trainer-packages .
#
# BASE_IMAGE is any image with Python 3.11 and `python3 -m venv`: python:3.11-slim where a
# registry is reachable, or tflab-base:bookworm, which images/base/build.sh bootstraps from
# Debian's packages where none is. The same file makes the GPU image (requirements/trainer-gpu.txt:
# TensorFlow with CUDA's libraries as wheels; the driver is never in the image, the NVIDIA
# Container Toolkit mounts the host's) and the arm64 one (requirements/trainer-arm64.txt, on an
# arm64 base): only the context's pins and wheels differ.
ARG BASE_IMAGE=python:3.11-slim

# The wheels are copied into this stage only: the image keeps the installed packages, not the
# 334 MB of wheels. The legacy builder leaves this stage as an untagged image; the lab removes it.
FROM ${BASE_IMAGE} AS install
LABEL tflab.image=trainer-install-stage
COPY requirements.txt /tmp/requirements.txt
COPY wheels/ /tmp/wheels/
# What is removed after the install is never read at run time, and is a fifth of the packages:
# TensorFlow's C++ headers (287 MB, 13,000 files: for compiling custom ops), libclang (64 MB: a
# dependency of TensorFlow's wheel that nothing imports at run time) and numpy's and h5py's own
# test suites. Fewer files matter beyond size: on fuse-overlayfs every layer built on these costs
# time in proportion to the files under it. The packages' __pycache__ stays: the root file system
# is read-only at run time, and without it every start would compile TensorFlow's Python anew.
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), "BASE_IMAGE must have Python 3.11, not " + sys.version' \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --quiet --no-cache-dir --no-index --no-deps --find-links=/tmp/wheels \
        -r /tmp/requirements.txt \
 && /opt/venv/bin/pip uninstall --quiet --yes libclang \
 && site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && rm -rf "$site/tensorflow/include" "$site/h5py/tests" \
 && find "$site/numpy" -depth -type d -name tests -exec rm -rf {} + \
 && /opt/venv/bin/python -c 'import tensorflow, tf_keras, h5py, numpy, tensorboard' \
 && /opt/venv/bin/pip check | grep -v -e '^tf-keras 2.21.0 requires tensorflow, which is not installed' \
        -e 'requires libclang, which is not installed' -e '^No broken requirements found' \
        | { ! grep . ; }  # fails on anything pip check finds but what was left out on purpose
# (tf-keras's missing tensorflow is intended: tensorflow-cpu is installed instead, and on arm64 the
# pins hold `tensorflow` itself.)

# Settings come before the big layer: every step on top of 1.3 GB of packages is slow to commit
# on some storage drivers (fuse-overlayfs: seconds a step).
FROM ${BASE_IMAGE}
LABEL tflab.image=trainer
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/opt/tflab \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    TF_USE_LEGACY_KERAS=1
USER 1000:1000
WORKDIR /tmp
CMD ["python", "-m", "tflab.train"]
COPY --from=install /opt/venv /opt/venv
