#!/usr/bin/env bash
# Set up what sparkmill needs on a Debian machine, idempotently:
#   - Debian packages: Java 17 (Spark and ZooKeeper need it), python3-venv and ZooKeeper (for
#     `sparkmill local-cluster up --ha zookeeper`);
#   - a virtualenv (default .venv, override with SPARKMILL_VENV) with sparkmill and its runtime
#     dependencies.
# With --test (scripts/test.sh passes it) also what only the tests need: Prometheus (promtool
# checks the metrics), Chromium and chromedriver (the dashboard test drives a headless
# browser), systemd-nspawn, debootstrap and an SSH client (the test bed), and the dev tools in
# the virtualenv (pytest, ruff, mypy...), PostgreSQL and its JDBC driver (the database source
# and sink tests start a throw-away server).
# Re-running it is cheap: each step is skipped when already done.
set -euo pipefail

for_tests=0
for arg in "$@"; do
  case "$arg" in
    --test) for_tests=1 ;;
    *) printf '[bootstrap] unknown argument %s (usage: bootstrap.sh [--test])\n' "$arg" >&2; exit 2 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARKMILL_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

log() { printf '[bootstrap] %s\n' "$*" >&2; }

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
    log "not root and no sudo: install the Debian packages yourself if any are missing"; fi
fi

packages=()
command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jre-headless)
"$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 || packages+=(python3-venv)
[ -f /usr/share/java/zookeeper.jar ] || packages+=(zookeeper)
if [ "$for_tests" -eq 1 ]; then
  command -v promtool >/dev/null 2>&1 || packages+=(prometheus)
  # The dashboard's browser test: Debian's Chromium and its WebDriver (nothing downloaded later).
  [ -x /usr/bin/chromium ] || packages+=(chromium)
  [ -x /usr/bin/chromedriver ] || packages+=(chromium-driver)
  # The test bed (scripts/testbed.sh, tests/testbed/): containers booted with systemd, a root
  # file system from debootstrap, SSH to the containers.
  command -v systemd-nspawn >/dev/null 2>&1 || packages+=(systemd-container)
  command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || packages+=(debootstrap)
  command -v ssh >/dev/null 2>&1 || packages+=(openssh-client)
  # tests/integration/test_jdbc.py: a PostgreSQL server it starts itself (no service is enabled
  # by the package here: PID 1 is not systemd on CI machines) and the driver Spark loads.
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || packages+=(postgresql)
  [ -f /usr/share/java/postgresql.jar ] || packages+=(libpostgresql-jdbc-java)
fi
if [ "${#packages[@]}" -gt 0 ]; then
  log "installing Debian packages: ${packages[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${packages[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi

# Reinstall only when the project's dependencies changed (or the dev tools are wanted now).
stamp="$VENV/.sparkmill-installed"
sum="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
have="$(cat "$stamp" 2>/dev/null || true)"
if [ "$for_tests" -eq 1 ]; then target="$ROOT[dev]" want="$sum dev"; else target="$ROOT" want="$sum"; fi
# A virtualenv with the dev tools has everything running needs.
if [ "$have" != "$want" ] && [ "$have" != "$sum dev" ]; then
  log "installing sparkmill and its dependencies into $VENV (pyspark takes a minute the first time)"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -e "$target"
  echo "$want" > "$stamp"
fi
