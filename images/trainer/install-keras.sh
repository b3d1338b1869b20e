#!/bin/sh
# A Keras release's layer (KERAS=3.12, nightly) on a TF line's packages image: the lab runs it as root
# in a container of that image, from a folder mounted read-only that holds it, the release's lock
# (requirements.txt: requirements/keras/<tf>-<keras>.txt, only what differs from the TF line's
# pins, hashed) and those wheels (wheels/), and commits the container (images.py). No TensorFlow is
# touched: a few MB, where a TF line's packages are 1.25 GB.
#
# `keras` and `keras-nightly` both install the folder keras/ (and nothing else but their
# .dist-info), so the one the TF line brought is removed first (the lock's "# removes:" line), never
# installed over. Removed by hand, not by `pip uninstall`: pip first moves every file aside, which on
# fuse-overlayfs copies each one up out of the image below; that took 43 of a layer's 150 s here
# (2 CPUs at load 18, 2026-12-06), the rm a second or two.
set -eu
here=$(dirname "$0")
site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
removes=$(sed -n 's/^# removes: //p' "$here/requirements.txt")
for name in $removes; do
    case "$name" in
        keras|keras-nightly) ;;
        *) echo "install-keras.sh: $name is not a Keras package (keras, keras-nightly)" >&2; exit 2 ;;
    esac
    dist=$(echo "$name" | tr - _)
    rm -rf "$site/keras" "$site/$dist"-[0-9]*.dist-info
done
# One "Processing" line per wheel: the lab turns them into its progress lines.
/opt/venv/bin/pip install --no-cache-dir --no-index --no-deps --require-hashes --disable-pip-version-check \
    --progress-bar off --no-compile --find-links="$here/wheels" -r "$here/requirements.txt"
# The root file system is read-only at run time: Keras's .pyc are written now (install-packages.sh).
/opt/venv/bin/python -m compileall -qq -j 0 "$site/keras" || true
# The release is checked by its metadata, not by `import keras`, which imports TensorFlow (49 s of the
# 150 above); the first run imports it anyway.
want=$(sed -n 's/^keras\(-nightly\)\{0,1\}==\([^ ]*\) .*/\2/p' "$here/requirements.txt")
got=$(/opt/venv/bin/python -c '
import importlib.metadata as m
print(" ".join(d.version for d in m.distributions() if d.metadata["Name"] in ("keras", "keras-nightly")))')
echo "checking: keras installed: $got"
if [ -n "$want" ] && [ "$got" != "$want" ]; then
    echo "install-keras.sh: the Keras installed is \"$got\", not the $want the lock pins alone" >&2
    exit 1
fi
# What pip check may find, left so on purpose: tf-keras's tensorflow, libclang (install-packages.sh), and
# TensorFlow's own Keras requirement where the release is keras-nightly (or the other way round).
/opt/venv/bin/pip check | grep -v -e '^tf-keras [0-9.]* requires tensorflow, which is not installed' \
    -e 'requires libclang, which is not installed' -e '^No broken requirements found' \
    -e '^tensorflow-cpu [0-9a-z.]* requires keras\(-nightly\)\{0,1\}, which is not installed' \
    | { ! grep . ; }
rm -rf /root/.cache /tmp/pip-*
