#!/usr/bin/env bash
# Lets an x86_64 Linux machine run linux/arm64 containers, under emulation: Debian's
# qemu-user-static, with its qemu-aarch64 binfmt handler registered with the F flag (the kernel
# opens the emulator when the handler is registered, so it also works inside containers, whose
# root file systems do not have it). Docker Desktop on a Mac needs none of this: it runs arm64
# natively, and amd64 under its own emulation.
#
#   sudo scripts/enable-arm64-emulation.sh
#
# Needs root. Idempotent; a registration lasts until the machine restarts.
set -euo pipefail

die() { echo "tflab: $*" >&2; exit 1; }

handler=/proc/sys/fs/binfmt_misc/qemu-aarch64
conf=/usr/lib/binfmt.d/qemu-aarch64.conf

case "$(uname -m)" in
    aarch64|arm64) echo "tflab: this machine is arm64 already: nothing to enable"; exit 0 ;;
esac
[ "$(id -u)" -eq 0 ] || die "registering an emulator needs root; run: sudo $0"

if [ ! -e "$conf" ]; then
    command -v apt-get >/dev/null || die "no apt-get to install qemu-user-static; install your distribution's qemu-user-static (with binfmt support) and rerun"
    echo "tflab: installing qemu-user-static (apt-get install qemu-user-static)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static; } >/dev/null \
        || die "could not install qemu-user-static with apt-get"
fi
[ -e "$conf" ] || die "qemu-user-static is installed but $conf is missing"

if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
        || die "could not mount binfmt_misc on /proc/sys/fs/binfmt_misc"
fi
if [ -e "$handler" ]; then
    # A handler registered without F (systemd-binfmt on a host whose package predates it, say)
    # works for host processes but not inside containers: replace it.
    if grep -q '^flags:.*F' "$handler"; then
        grep -qx enabled "$handler" || echo 1 >"$handler"  # registered, but switched off
        echo "tflab: arm64 emulation is already enabled ($handler)"
        exit 0
    fi
    echo -1 >"$handler"
fi
# The .conf line is the register string itself (":qemu-aarch64:M::<magic>:<mask>:<interpreter>:<flags>").
grep -v '^#' "$conf" | head -n1 >/proc/sys/fs/binfmt_misc/register \
    || die "could not register $conf with binfmt_misc"
grep -q '^flags:.*F' "$handler" || die "registered $handler but without the F flag: containers cannot use it"
echo "tflab: arm64 emulation enabled ($(sed -n 's/^interpreter //p' "$handler"), flags $(sed -n 's/^flags: //p' "$handler"))"
