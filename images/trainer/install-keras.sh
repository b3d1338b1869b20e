#!/bin/sh
# A Keras release's layer (KERAS=3.12, nightly) on a TF line's packages image: the lab runs it as root
# in a container of that image, from a folder mounted read-only that holds it, the release's lock
# (requirements.txt: requirements/keras/<tf>-<keras>.txt, only what differs from the TF line's
# pins, hashed) and those wheels (wheels/), and commits the container (images.py). Seconds: no
# TensorFlow is touched.
#
# `keras` and `keras-nightly` both install the folder keras/, so the one the TF line brought is
# uninstalled first (the lock's "# removes:" line), never installed over.
set -eu
here=$(dirname "$0")
removes=$(sed -n 's/^# removes: //p' "$here/requirements.txt")
for name in $removes; do
    case "$name" in *[!a-z0-9.-]*) echo "install-keras.sh: $name is not a package name" >&2; exit 2 ;; esac
done
if [ -n "$removes" ]; then
    # shellcheck disable=SC2086 # one word per package, checked above
    /opt/venv/bin/pip uninstall --quiet --yes --disable-pip-version-check $removes
fi
# One "Processing" line per wheel: the lab turns them into its progress lines.
/opt/venv/bin/pip install --no-cache-dir --no-index --no-deps --require-hashes --disable-pip-version-check \
    --progress-bar off --no-compile --find-links="$here/wheels" -r "$here/requirements.txt"
site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The root file system is read-only at run time: Keras's .pyc are written now (install-packages.sh).
/opt/venv/bin/python -m compileall -qq -j 0 "$site/keras" || true
want=$(sed -n 's/^keras\(-nightly\)\{0,1\}==\([^ ]*\) .*/\2/p' "$here/requirements.txt")
got=$(TF_USE_LEGACY_KERAS=0 /opt/venv/bin/python -c 'import keras; print(keras.__version__)')
echo "checking: import keras: $got"
if [ -n "$want" ] && [ "$got" != "$want" ]; then
    echo "install-keras.sh: import keras gives $got, not the $want the lock pins" >&2
    exit 1
fi
# What pip check may find, left so on purpose: tf-keras's tensorflow, libclang (install-packages.sh), and
# TensorFlow's own Keras requirement where the release is keras-nightly (or the other way round).
/opt/venv/bin/pip check | grep -v -e '^tf-keras [0-9.]* requires tensorflow, which is not installed' \
    -e 'requires libclang, which is not installed' -e '^No broken requirements found' \
    -e '^tensorflow-cpu [0-9a-z.]* requires keras\(-nightly\)\{0,1\}, which is not installed' \
    | { ! grep . ; }
rm -rf /root/.cache /tmp/pip-*
