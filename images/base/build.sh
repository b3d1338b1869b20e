#!/usr/bin/env bash
# Builds a minimal Debian bookworm image with Python 3.11 from Debian's own packages, for machines
# whose Docker Engine cannot pull python:3.11-slim (no registry). It stands in for that image: the
# trainer Dockerfile only needs `python3 -m venv`, which both provide.
#
#   images/base/build.sh [TAG [PLATFORM]]   # default: tflab-base:bookworm, the engine's platform
#   images/base/build.sh tflab-base:bookworm-arm64 linux/arm64
#
# PLATFORM is linux/amd64 or linux/arm64. A platform other than the machine's own needs its
# binaries to run under emulation (scripts/enable-arm64-emulation.sh on x86_64): debootstrap runs
# the packages' install scripts inside the new root file system. Building arm64 on x86_64 took
# 5 minutes instead of 40 s (2026-12-03).
#
# Needs root (debootstrap, which it installs with apt-get where missing) and a reachable Debian
# mirror: DEBIAN_MIRROR, else the one apt uses.
set -euo pipefail

tag=${1:-tflab-base:bookworm}
platform=${2:-}
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

# Debian's and Docker's names for the architecture.
platform=${platform:-linux/$(docker info --format '{{.Architecture}}' 2>/dev/null)}
case "$platform" in
    linux/amd64|linux/x86_64) arch=amd64 ;;
    linux/arm64|linux/aarch64) arch=arm64 ;;
    *) die "cannot build the base for platform $platform: expected linux/amd64 or linux/arm64" ;;
esac
host_arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
if [ "$arch" = arm64 ] && [ "$host_arch" != arm64 ] && [ "$host_arch" != aarch64 ] \
        && ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
    die "this $host_arch machine cannot run arm64 binaries, which an arm64 base needs; enable emulation: sudo scripts/enable-arm64-emulation.sh"
fi

mirror=${DEBIAN_MIRROR:-$(apt_mirror)}
rootfs=$(mktemp -d /tmp/tflab-base.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "tflab: bootstrapping $tag from $mirror ($suite $arch, minbase + python3)"
debootstrap --arch="$arch" --variant=minbase --include=python3,python3-venv,ca-certificates "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -n 20 "$rootfs.log" >&2; die "debootstrap failed (log above)"; }
rm -f "$rootfs.log"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
# Documentation, manual pages and message translations: nothing in the lab reads them (LANG=C.UTF-8
# needs no locale files), and they are 52 MB in 3,000 files, which every layer built on this base
# pays for on fuse-overlayfs (its layer diffs walk every file). The copyright files stay, and dpkg
# is told to leave the rest out of any package installed later.
find "$rootfs/usr/share/doc" -type f ! -name copyright -delete
find "$rootfs/usr/share/doc" -depth -type d -empty -delete
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/tflab-no-docs" <<'DPKG'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
DPKG

tar -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$tag" >/dev/null

# `docker import` labels the image with the engine's architecture whatever it holds (engine 20.10
# ignores `import --platform`), and an engine runs or builds on an image only for the platform
# its label names. Relabel: rewrite the image's config and load it back.
if [ "$(docker image inspect -f '{{.Architecture}}' "$tag")" != "$arch" ]; then
    bundle=$(mktemp -d /tmp/tflab-base-image.XXXXXX)
    trap 'rm -rf "$rootfs" "$bundle"' EXIT
    docker save "$tag" | tar -C "$bundle" -x
    python3 - "$bundle" "$arch" <<'PYTHON'
import hashlib, json, pathlib, sys
bundle, arch = pathlib.Path(sys.argv[1]), sys.argv[2]
manifest = json.loads((bundle / "manifest.json").read_text())
old = bundle / manifest[0]["Config"]
config = json.loads(old.read_text())
config["architecture"] = arch
if arch == "arm64":
    config["variant"] = "v8"  # what arm64 images from a registry say, and what a platform match expects
data = json.dumps(config).encode()
new = hashlib.sha256(data).hexdigest() + ".json"  # the config's name is its digest: the image's id
old.unlink()
(bundle / new).write_bytes(data)
manifest[0]["Config"] = new
(bundle / "manifest.json").write_text(json.dumps(manifest))
PYTHON
    docker image rm "$tag" >/dev/null
    tar -C "$bundle" -c . | docker load >/dev/null
fi
echo "tflab: built $tag (linux/$arch, $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
