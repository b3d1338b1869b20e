#!/usr/bin/env bash
# Lets an x86_64 Linux machine run linux/arm64 containers, under emulation: Debian's
# qemu-user-static, with its qemu-aarch64 binfmt handler registered with the F flag (the kernel
# opens the emulator when the handler is registered, so it also works inside containers, whose
# root file systems do not have it). Docker Desktop on a Mac needs none of this: it runs arm64
# natively, and amd64 under its own emulation.
#
#   sudo scripts/enable-arm64-emulation.sh              # enable it (root); silent if it is on already
#   scripts/enable-arm64-emulation.sh --check           # exit 0 if it is on (or the machine is arm64)
#   scripts/enable-arm64-emulation.sh --if-needed       # what `make test` runs: see below
#
# --if-needed enables it only as root on Linux and only where it is off; elsewhere it does
# nothing, and a failure is one line, not an error: the arm64 tests are then skipped (outside
# CI, which requires them) with a line saying how to include them.
#
# Needs root to enable. Idempotent; a registration lasts until the machine restarts.
# TFLAB_BINFMT_MISC and TFLAB_BINFMT_CONF move the kernel's folder and the package's register
# line elsewhere, for the lab's tests of this script; nothing else sets them.
set -euo pipefail

mode=${1:-}
case "$mode" in ""|--check|--if-needed) ;; *) echo "tflab: $0 $mode is not allowed: expected no argument, --check or --if-needed" >&2; exit 2 ;; esac

binfmt=${TFLAB_BINFMT_MISC:-/proc/sys/fs/binfmt_misc}
handler=$binfmt/qemu-aarch64
conf=${TFLAB_BINFMT_CONF:-/usr/lib/binfmt.d/qemu-aarch64.conf}

enabled() {
    case "$(uname -m)" in aarch64|arm64) return 0 ;; esac
    [ -r "$handler" ] && [ "$(head -n1 "$handler")" = enabled ] && grep -q '^flags:.*F' "$handler"
}

if [ "$mode" = --check ]; then enabled; exit; fi
if [ "$mode" = --if-needed ]; then
    # Not root, not Linux, opted out, or on already: nothing to do, and nothing to say (the tests say it).
    [ "$(uname -s)" = Linux ] && [ "$(id -u)" -eq 0 ] && [ "${TFLAB_SKIP_ARM64:-}" != 1 ] && ! enabled || exit 0
    errors=$(mktemp)
    trap 'rm -f "$errors"' EXIT
    if ! bash "$0" 2>"$errors"; then
        echo "tflab: could not enable arm64 emulation ($(tail -n1 "$errors" | sed 's/^tflab: //')): the arm64 tests will be skipped" >&2
    fi
    exit 0
fi

die() { echo "tflab: $*" >&2; exit 1; }

enabled && exit 0
[ "$(id -u)" -eq 0 ] || die "registering an emulator needs root; run: sudo $0"

if [ ! -e "$conf" ]; then
    command -v apt-get >/dev/null || die "no apt-get to install qemu-user-static; install your distribution's qemu-user-static (with binfmt support) and rerun"
    echo "tflab: installing qemu-user-static (apt-get install qemu-user-static)"
    log=$(mktemp)
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static; } >"$log" 2>&1 \
        || { tail -n 5 "$log" >&2; rm -f "$log"; die "could not install qemu-user-static with apt-get"; }
    rm -f "$log"
fi
[ -e "$conf" ] || die "qemu-user-static is installed but $conf is missing"

if [ ! -e "$binfmt/register" ]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || die "could not mount binfmt_misc on $binfmt"
    enabled && exit 0  # the package's own registration, now visible
fi
if [ -e "$handler" ]; then
    # A handler registered without F (systemd-binfmt on a host whose package predates it, say)
    # works for host processes but not inside containers: replace it. One switched off is switched on.
    if grep -q '^flags:.*F' "$handler"; then
        echo 1 >"$handler"
        enabled && exit 0
    fi
    echo -1 >"$handler"
fi
# The .conf line is the register string itself (":qemu-aarch64:M::<magic>:<mask>:<interpreter>:<flags>").
grep -v '^#' "$conf" | head -n1 >"$binfmt/register" 2>/dev/null || die "could not register $conf with binfmt_misc"
enabled || die "registered $handler but it is not enabled with the F flag: containers cannot use it"
echo "tflab: arm64 emulation enabled ($(sed -n 's/^interpreter //p' "$handler"), flags $(sed -n 's/^flags: //p' "$handler"))"
