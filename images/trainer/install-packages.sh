#!/bin/sh
# Installs the trainer image's Python packages into /opt/venv. The lab runs it as root in a container
# of the base image, from a folder mounted read-only that holds it, the variant's pins
# (requirements.txt) and its wheelhouse (wheels/), so no wheel ever lands in a layer, and commits
# that container as the packages image, tflab-trainer-packages:<variant>-<digest> (images.py).
#
# What is removed after the install is never read at run time, and is a fifth of the packages:
# TensorFlow's C++ headers (287 MB, 13,000 files: for compiling custom ops), libclang (64 MB: a
# dependency of TensorFlow's wheel that nothing imports at run time) and numpy's and h5py's own
# test suites. Fewer files matter beyond size: on fuse-overlayfs every layer built on these costs
# time in proportion to the files under it. The packages' __pycache__ stays: the root file system
# is read-only at run time, and without it every start would compile TensorFlow's Python anew.
#
# pip does not compile as it installs (--no-compile): it compiles file by file on one CPU, which
# made the install 135 s here; unpacking alone takes 39 s, and compileall on every CPU 14 s, after
# the files that are removed anyway are gone (measured side by side, 2 CPUs, 2026-12-03). The same
# files get the same .pyc (timestamp-checked, as pip writes them); like pip, a file that does not
# compile (none here) is left to be compiled when imported.
set -eu
here=$(dirname "$0")
python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), "BASE_IMAGE must have Python 3.11, not " + sys.version'
python3 -m venv /opt/venv
# One "Processing" line per wheel: the lab turns them into its progress lines.
/opt/venv/bin/pip install --no-cache-dir --no-index --no-deps --disable-pip-version-check --progress-bar off \
    --no-compile --find-links="$here/wheels" -r "$here/requirements.txt"
/opt/venv/bin/pip uninstall --quiet --yes libclang
site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$site/tensorflow/include" "$site/h5py/tests"
find "$site/numpy" -depth -type d -name tests -exec rm -rf {} +
echo "compiling: the packages' Python, on every CPU"
/opt/venv/bin/python -m compileall -qq -j 0 "$site" || true
# TF=<version> images (requirements/tf/<minor>.txt) may have no tf_keras (TF 2.12, 2.13, next) and no
# tensorboard (TF 2.21 on dropped it): each is imported where it is installed.
modules=tensorflow,h5py,numpy
for optional in tf_keras tensorboard; do
    if /opt/venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$optional') is None)"; then
        modules=$modules,$optional
    fi
done
echo "checking: import $modules; pip check"
/opt/venv/bin/python -c "import $modules"
# pip check finds nothing but what is left out on purpose: tf-keras's tensorflow (tensorflow-cpu is
# installed instead; on arm64 the pins hold `tensorflow` itself) and libclang.
/opt/venv/bin/pip check | grep -v -e '^tf-keras [0-9.]* requires tensorflow, which is not installed' \
    -e 'requires libclang, which is not installed' -e '^No broken requirements found' \
    | { ! grep . ; }
rm -rf /root/.cache /tmp/pip-*
