# Sourced by .ci/run after the package is installed: a private Docker engine for the
# docker sandbox tests. Installs docker.io if dockerd is missing, starts dockerd with no
# bridge network (a container then has only `lo`, and nothing forwards or masquerades its
# traffic), exports DOCKER_HOST and builds the sandbox image. When any step fails it warns
# and leaves DOCKER_HOST unset, so the docker tests skip instead of failing the run.
# Call stop_dockerd at exit (a trap in .ci/run): it stops this dockerd by its pid.
#
# Written for a caller running `set -euo pipefail`: every step that may fail is tested.

DOCKERD_DIR=""
DOCKERD_PID=""

stop_dockerd() {
    [ -n "$DOCKERD_DIR" ] || return 0
    local pid="$DOCKERD_PID" waited=0
    if [ -s "$DOCKERD_DIR/dockerd.pid" ]; then
        pid=$(cat "$DOCKERD_DIR/dockerd.pid")
    fi
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 150 ]; do
            sleep 0.1
            waited=$((waited + 1))
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$DOCKERD_DIR" 2>/dev/null || true
    DOCKERD_DIR=""
    DOCKERD_PID=""
}

_docker_warn() {
    echo "warning: docker sandbox tests will be skipped: $*" >&2
}

_install_docker() {
    command -v dockerd >/dev/null 2>&1 && return 0
    if [ "$(id -u)" != 0 ]; then
        _docker_warn "dockerd is not installed and this user cannot install it"
        return 1
    fi
    echo "installing docker.io" >&2
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >/dev/null; }; then
        _docker_warn "apt-get install docker.io failed"
        return 1
    fi
}

_start_dockerd() {
    if [ "$(id -u)" != 0 ]; then
        _docker_warn "starting dockerd needs root"
        return 1
    fi
    DOCKERD_DIR=$(mktemp -d /tmp/ci-dockerd.XXXXXX) || return 1
    local sock="$DOCKERD_DIR/docker.sock" waited=0
    # Exactly these network flags: the default bridge would add a MASQUERADE rule and
    # turn on ip_forward, giving containers a way out.
    dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
        --data-root "$DOCKERD_DIR/data" --exec-root "$DOCKERD_DIR/exec" \
        --pidfile "$DOCKERD_DIR/dockerd.pid" -H "unix://$sock" \
        >"$DOCKERD_DIR/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    until docker --host "unix://$sock" version >/dev/null 2>&1; do
        if ! kill -0 "$DOCKERD_PID" 2>/dev/null || [ "$waited" -ge 300 ]; then
            _docker_warn "dockerd did not start; its log ends with: $(tail -n 3 "$DOCKERD_DIR/dockerd.log" | tr '\n' ' ')"
            stop_dockerd
            return 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    export DOCKER_HOST="unix://$sock"
}

_setup_docker() {
    _install_docker || return 1
    _start_dockerd || return 1
    if ! python -m services.sandbox build-image; then
        _docker_warn "the sandbox image could not be built"
        unset DOCKER_HOST
        stop_dockerd
        return 1
    fi
}

_setup_docker || true
