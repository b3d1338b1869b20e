#!/bin/sh
# Installs the trainer image's Python packages into /opt/venv. The lab runs it as root in a container
# of the base image, from a folder mounted read-only that holds it, the variant's pins
# (requirements.txt) and its wheelhouse (wheels/), so no wheel ever lands in a layer, and commits
# that container as the packages image, tflab-trainer-packages:<variant>-<digest> (images.py).
#
#   install-packages.sh                  # all of it, in a container of the image's own platform
#   install-packages.sh unpack aarch64   # for another platform: everything but the check, natively
#   install-packages.sh check            # then, in that platform's container: the interpreter and the check
#
# Another platform (arm64 on x86_64) runs under emulation, where pip and compileall took most of a
# 16-minute build (issue 46). Neither needs the image's CPU: pip unpacks binary wheels for any
# platform into a --target folder, and bytecode is the same on every platform for one CPython. So
# the lab runs `unpack` in a container of the engine's own platform, copies its /opt/venv into a
# container of the image's platform, and runs only `check` (the import, pip check) emulated there.
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
phase=${1:-all}
python_version() {
    python3 -c 'import platform; print(platform.python_version())'
}

venv() {
    python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), "BASE_IMAGE must have Python 3.11, not " + sys.version'
    python3 -m venv /opt/venv
    site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
}

install() {
    # One "Processing" line per wheel: the lab turns them into its progress lines.
    /opt/venv/bin/pip install --no-cache-dir --no-index --no-deps --disable-pip-version-check --progress-bar off \
        --no-compile --find-links="$here/wheels" -r "$here/requirements.txt"
}

# pip installs another platform's wheels only into a --target folder, with the scripts it makes
# under bin/ (their #! line is this venv's python, /opt/venv/bin/python3, as in the image) and
# recorded as ../../bin/ from there: moved into the venv, they are ../../../bin/ from its
# site-packages. A package the venv has already (setuptools) is uninstalled first, as pip would.
install_for() {
    machine=$1
    unpacked=/tmp/tflab-unpacked
    /opt/venv/bin/pip install --no-cache-dir --no-index --no-deps --disable-pip-version-check --progress-bar off \
        --no-compile --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        --platform "manylinux2014_$machine" --platform "manylinux_2_17_$machine" \
        --platform "manylinux_2_27_$machine" --platform "manylinux_2_28_$machine" \
        --target "$unpacked" --find-links="$here/wheels" -r "$here/requirements.txt"
    names=$(cd "$unpacked" && ls -d *.dist-info | sed 's/-[^-]*\.dist-info$//')
    # shellcheck disable=SC2086 # one argument per name
    /opt/venv/bin/pip uninstall --quiet --yes $names 2>&1 | grep -v '^WARNING: Skipping .* as it is not installed' || true
    sed -i 's#^\.\./\.\./bin/#../../../bin/#' "$unpacked"/*.dist-info/RECORD
    if [ -d "$unpacked/bin" ]; then
        mv "$unpacked"/bin/* /opt/venv/bin/
        rmdir "$unpacked/bin"
    fi
    mv "$unpacked"/* "$site"/
    rmdir "$unpacked"
}

prune_and_compile() {
    /opt/venv/bin/pip uninstall --quiet --yes libclang
    rm -rf "$site/tensorflow/include" "$site/h5py/tests"
    find "$site/numpy" -depth -type d -name tests -exec rm -rf {} +
    echo "compiling: the packages' Python, on every CPU"
    /opt/venv/bin/python -m compileall -qq -j 0 "$site" || true
}

check() {
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
}

case "$phase" in
    all)
        venv
        install
        prune_and_compile
        check
        ;;
    unpack)
        venv
        install_for "$2"
        prune_and_compile
        # The interpreter's links and pyvenv.cfg are the image's own base's to make (`check`); the
        # Python that compiled is written down for `check` to compare, and removed there.
        rm -f /opt/venv/bin/python /opt/venv/bin/python3 /opt/venv/bin/python3.11 /opt/venv/pyvenv.cfg /opt/venv/lib64
        python_version > /opt/venv/.compiled-by
        ;;
    check)
        python3 -m venv --without-pip /opt/venv
        site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        compiled_by=$(cat /opt/venv/.compiled-by)
        rm /opt/venv/.compiled-by
        if [ "$compiled_by" != "$(python_version)" ]; then
            # Still the same bytecode format (one magic number a CPython minor), but not byte for byte
            # what this Python writes: compiled again here, emulated, as a build on this platform would.
            echo "compiling: again, the bases' Python differ ($compiled_by natively, $(python_version) here)"
            /opt/venv/bin/python -m compileall -qq -f -j 0 "$site" || true
        fi
        check
        ;;
    *)
        echo "install-packages.sh: $phase is not a phase (all, unpack <machine>, check)" >&2
        exit 2
        ;;
esac
rm -rf /root/.cache /tmp/pip-*
