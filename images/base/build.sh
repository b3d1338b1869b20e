#!/usr/bin/env bash
# Builds a minimal Debian bookworm image with Python 3.11 from Debian's own packages, for machines
# whose Docker Engine cannot pull python:3.11-slim (no registry). It stands in for that image: the
# trainer Dockerfile only needs `python3 -m venv`, which both provide.
#
#   images/base/build.sh [TAG]        # default tag: tflab-base:bookworm
#
# Needs root (debootstrap, which it installs with apt-get where missing) and a reachable Debian
# mirror: DEBIAN_MIRROR, else the one apt uses.
set -euo pipefail

tag=${1:-tflab-base:bookworm}
suite=bookworm

die() { echo "tflab: $*" >&2; exit 1; }

apt_mirror() {
    # The first Debian archive apt is configured with (deb822 .sources or one-line .list files).
    local uri
    uri=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n1 || true)
    [ -n "$uri" ] || uri=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        | awk '{print $2}' | grep -v security | head -n1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

[ "$(id -u)" -eq 0 ] || die "building the local base image needs root (debootstrap); run: sudo $0 $tag"
if ! command -v debootstrap >/dev/null; then
    # Debian's own package: what a fresh Debian host needs to build the base, fetched from the
    # same mirror the base itself comes from.
    command -v apt-get >/dev/null || die "debootstrap is not installed and there is no apt-get to install it; install debootstrap, or set BASE_IMAGE to an image you have"
    echo "tflab: installing debootstrap (apt-get install debootstrap)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; } >/dev/null \
        || die "could not install debootstrap with apt-get; install it, or set BASE_IMAGE to an image you have"
fi
command -v docker >/dev/null || die "docker is not installed"

mirror=${DEBIAN_MIRROR:-$(apt_mirror)}
rootfs=$(mktemp -d /tmp/tflab-base.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "tflab: bootstrapping $tag from $mirror ($suite, minbase + python3)"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -n 20 "$rootfs.log" >&2; die "debootstrap failed (log above)"; }
rm -f "$rootfs.log"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$tag" >/dev/null
echo "tflab: built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
