#!/usr/bin/env bash
# Build the vkbridge image from the Dockerfile and print its ID and size.
#
#   bash hack/image.sh [--tag vkbridge:dev] [--save FILE.tar] [--sbom FILE.cdx.json] [--base IMAGE]
#
# Base image: --base (or $PYTHON_IMAGE) if given; otherwise python:3.11-slim when it is present or can be
# pulled, else a Debian bookworm base made from Debian's packages with debootstrap (cached in
# $VKBRIDGE_CACHE, default ~/.cache/vkbridge, so only the first run pays for it). The Dockerfile keeps
# its public default; the base is passed as the PYTHON_IMAGE build arg.
# Docker: the daemon at $DOCKER_HOST or /var/run/docker.sock when one answers; otherwise the script starts
# its own dockerd (vfs storage, no iptables, no bridge, its own data root, exec root, pid file and socket)
# and stops it by pid at the end, leaving no process, mount or interface behind. Its data root is
# $VKBRIDGE_CACHE/docker, kept so a warm run reuses the dependency layer; with vfs every layer is a full
# copy, so the build cache is pruned to the last build's records after each run (about 2-3 GB on disk).
# --save writes `docker save` output, which `ctr -n k8s.io images import FILE` loads into containerd.
# --sbom writes a CycloneDX SBOM of the built image, read from its files (hack/sbom.py: Debian packages
# and Python distributions, with requirements/image.txt's hashes).
# Checks before it prints: the image runs `--help`, `version` and `doctor --help` with a read-only root,
# as uid 65532, without a network.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${VKBRIDGE_CACHE:-$HOME/.cache/vkbridge}
TAG=vkbridge:dev
SAVE=""
SBOM=""
BASE=${PYTHON_IMAGE:-}
PUBLIC_BASE=python:3.11-slim
SUITE=bookworm
INCLUDE=python3,python3-pip,python3-venv,ca-certificates
DEBIAN_BASE=vkbridge-base:$SUITE

while (($#)); do
    case $1 in
        --tag) TAG=$2; shift 2 ;;
        --save) SAVE=$(realpath -m "$2"); shift 2 ;;
        --sbom) SBOM=$(realpath -m "$2"); shift 2 ;;
        --base) BASE=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "image.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

say() { printf '[image.sh %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
START=$SECONDS

# --- tools (Debian's packages) ----------------------------------------------------------------------
need=()
[[ -x /usr/bin/docker && -x /usr/sbin/dockerd ]] || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's client: its built-in BuildKit builds without buildx (a newer client on PATH may insist on it).
DOCKER=/usr/bin/docker

# --- a docker daemon ----------------------------------------------------------------------------------
DOCKERD_PID=""
RUNDIR=""
cleanup() {
    local rc=$?
    if [[ -n $DOCKERD_PID ]]; then
        say "stopping the dockerd this script started (pid $DOCKERD_PID)"
        kill -TERM "$DOCKERD_PID" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$DOCKERD_PID" 2>/dev/null || true
        wait "$DOCKERD_PID" 2>/dev/null || true
    fi
    if [[ -n $RUNDIR ]]; then
        # Mounts dockerd may have left under its roots (none with vfs and no running container).
        grep -oE " ($RUNDIR|$CACHE/docker)[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
        rm -rf "$RUNDIR"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z ${DOCKER_HOST:-} ]] && $DOCKER -H unix:///var/run/docker.sock version >/dev/null 2>&1; then
    export DOCKER_HOST=unix:///var/run/docker.sock
fi
if [[ -n ${DOCKER_HOST:-} ]] && $DOCKER version >/dev/null 2>&1; then
    say "using the docker daemon at $DOCKER_HOST"
else
    RUNDIR=$(mktemp -d /tmp/vkbridge-dockerd.XXXXXX)   # short: it holds unix sockets
    mkdir -p "$CACHE/docker"
    # Keep the build cache bounded: it lives in the cache dir between runs.
    cat >"$RUNDIR/daemon.json" <<'EOF'
{"builder": {"gc": {"enabled": true, "defaultKeepStorage": "1GB"}}, "features": {"buildkit": true}}
EOF
    export DOCKER_HOST=unix://$RUNDIR/docker.sock
    say "starting dockerd (data root $CACHE/docker, log $RUNDIR/dockerd.log)"
    /usr/sbin/dockerd --storage-driver vfs --iptables=false --ip-masq=false --bridge=none \
        --data-root "$CACHE/docker" --exec-root "$RUNDIR/exec" --pidfile "$RUNDIR/dockerd.pid" \
        -H "$DOCKER_HOST" --config-file "$RUNDIR/daemon.json" >"$RUNDIR/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    for i in $(seq 1 120); do
        $DOCKER version >/dev/null 2>&1 && break
        if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
            DOCKERD_PID=""; tail -20 "$RUNDIR/dockerd.log" >&2; say "dockerd exited"; exit 1
        fi
        ((i == 120)) && { tail -20 "$RUNDIR/dockerd.log" >&2; say "dockerd did not answer in 60 s"; exit 1; }
        sleep 0.5
    done
fi

# --- the base image -----------------------------------------------------------------------------------
debian_base() {
    # Cached rootfs tarball; its name carries what went into it.
    local key tarball root
    key=$(printf '%s %s' "$SUITE" "$INCLUDE" | sha256sum | cut -c1-12)
    tarball=$CACHE/debian-$SUITE-$key.tar
    if [[ ! -s $tarball ]]; then
        say "making a Debian $SUITE base with debootstrap (first run only; about a minute)"
        root=$(mktemp -d /tmp/vkbridge-rootfs.XXXXXX)
        # The chroot's /proc and /sys are debootstrap's; unmount them whatever happens.
        if ! debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$root" \
                http://deb.debian.org/debian >"$root.log" 2>&1; then
            tail -20 "$root.log" >&2
            grep -oE " $root/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l || true
            rm -rf "$root" "$root.log"; say "debootstrap failed"; exit 1
        fi
        grep -oE " $root/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l || true
        # pip in the build verifies PyPI with this machine's CA bundle (it may hold a proxy's CA).
        cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
        # What no image needs: downloaded .debs, package lists, docs, man pages, translations.
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
            "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* "$root"/var/log/*
        chmod 755 "$root"   # mktemp made it 0700: as the image's / it would lock out the non-root user
        mkdir -p "$CACHE"
        tar --numeric-owner -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$root" "$root.log"
    fi
    if ! $DOCKER image inspect "$DEBIAN_BASE" >/dev/null 2>&1 \
        || [[ $($DOCKER image inspect -f '{{index .Config.Labels "vkbridge.base.key"}}' "$DEBIAN_BASE") != "$key" ]]; then
        say "importing $tarball as $DEBIAN_BASE"
        $DOCKER import --change "LABEL vkbridge.base.key=$key" \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["python3"]' "$tarball" "$DEBIAN_BASE" >/dev/null
    fi
    BASE=$DEBIAN_BASE
}

if [[ -z $BASE ]]; then
    if $DOCKER image inspect "$PUBLIC_BASE" >/dev/null 2>&1 \
        || timeout 20 $DOCKER pull -q "$PUBLIC_BASE" >/dev/null 2>&1; then
        BASE=$PUBLIC_BASE
    else
        say "$PUBLIC_BASE cannot be pulled here: using a base made from Debian's packages"
        debian_base
    fi
fi

# --- build --------------------------------------------------------------------------------------------
REVISION=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p;T;q' "$ROOT/pyproject.toml")
say "building $TAG from $BASE"
BUILD_START=$SECONDS
mkdir -p "$CACHE"
BUILD_LOG=$CACHE/last-build.log
DOCKER_BUILDKIT=1 $DOCKER build --network host --progress plain -t "$TAG" \
    --build-arg PYTHON_IMAGE="$BASE" --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
    --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$ROOT" >"$BUILD_LOG" 2>&1 \
    || { tail -40 "$BUILD_LOG" >&2; say "docker build failed (log: $BUILD_LOG)"; exit 1; }
BUILD_SECONDS=$((SECONDS - BUILD_START))
$DOCKER image prune -f >/dev/null   # the previous build of the tag, now dangling
# With vfs every cached layer is a full copy of its file system (~150 MB on disk for a few MB the
# daemon reports): keep only the most recently used records, which hold this build's layers. Only in
# our own daemon: someone else's build cache is theirs.
if [[ -n $DOCKERD_PID ]]; then
    $DOCKER builder prune -af --keep-storage "${VKBRIDGE_BUILD_CACHE:-100MB}" >/dev/null
fi

# --- check: it runs read-only, as the non-root user, without a network --------------------------------
# The entrypoint once, then the rest in one container (with vfs each container copies the whole image).
say "checking vkbridge --help, version and doctor --help (read-only, uid 65532, no network)"
run=("$DOCKER" run --rm --read-only --user 65532 --network none)
"${run[@]}" "$TAG" --help >/dev/null || { say "the image failed: vkbridge --help"; exit 1; }
# shellcheck disable=SC2016  # $(id -u) is for the container's shell
"${run[@]}" --entrypoint /bin/sh "$TAG" -ec \
    'vkbridge version; vkbridge doctor --help >/dev/null; virtual-kubelet --help >/dev/null; test "$(id -u)" = 65532' \
    || { say "the image failed: vkbridge version / doctor --help / virtual-kubelet --help"; exit 1; }

if [[ -n $SAVE ]]; then
    mkdir -p "$(dirname "$SAVE")"
    $DOCKER save -o "$SAVE" "$TAG"
    say "saved $TAG to $SAVE (ctr -n k8s.io images import $SAVE)"
fi

ID=$($DOCKER image inspect -f '{{.Id}}' "$TAG")
if [[ -n $SBOM ]]; then
    mkdir -p "$(dirname "$SBOM")"
    cid=$($DOCKER create "$TAG")
    if $DOCKER export "$cid" | python3 "$ROOT/hack/sbom.py" --image "$TAG@$ID" >"$SBOM.tmp"; then
        mv "$SBOM.tmp" "$SBOM"
        $DOCKER rm "$cid" >/dev/null
        say "SBOM of $TAG in $SBOM ($(grep -c '"purl"' "$SBOM") components)"
    else
        $DOCKER rm "$cid" >/dev/null; rm -f "$SBOM.tmp"; say "the SBOM could not be made"; exit 1
    fi
fi
SIZE=$($DOCKER image inspect -f '{{.Size}}' "$TAG")
BASE_SIZE=$($DOCKER image inspect -f '{{.Size}}' "$BASE")
echo "image: $TAG"
echo "id: $ID"
echo "size: $((SIZE / 1000000)) MB (base $BASE: $((BASE_SIZE / 1000000)) MB, vkbridge adds $(((SIZE - BASE_SIZE) / 1000000)) MB)"
echo "time: $((SECONDS - START)) s (docker build $BUILD_SECONDS s)"
