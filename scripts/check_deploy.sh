#!/usr/bin/env bash
# Check the deployment files for real: the systemd units (deploy/systemd/), the Ansible playbook
# and role (ansible/), by converging the role on this machine inside a temporary directory.
#
#   scripts/check_deploy.sh                  # every check (about 2 minutes)
#   scripts/check_deploy.sh --update-units   # re-render deploy/systemd/ from the role's templates
#
# Steps: install ansible-core and ansible-lint into $VENV (default .venv) if missing; check that
# deploy/systemd/ is the role's templates rendered with its defaults; systemd-analyze verify and
# security; ansible-playbook --syntax-check; ansible-lint; converge site.yml against localhost
# twice (the second run must change nothing), with every path, the user and the unit directory
# moved into the temporary directory and sparkmill_manage_services=false (PID 1 need not be
# systemd); then check what it installed: the configuration loads with sparkmill's own
# validation, the units are in place and verify, the installed dispatcher starts, stops on
# SIGTERM with exit 0 and exits 2 on a bad configuration; an HA variant renders the ZooKeeper
# quorum; a bad value is refused by the role before it reaches the file.
#
# Exit codes: 0 every check passed; 1 a check failed; 77 ansible-core/ansible-lint are missing
# and cannot be installed (no package index reachable), so nothing was checked.
# CHECK_DEPLOY_KEEP=1 keeps the temporary directory for a look afterwards.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
UPDATE_UNITS=0
case "${1:-}" in
  "") ;;
  --update-units) UPDATE_UNITS=1 ;;
  *) echo "usage: $0 [--update-units]" >&2; exit 2 ;;
esac

step() { printf '\n== %s\n' "$*"; }
note() { printf '   %s\n' "$*"; }
fail() { printf '\ncheck_deploy: FAILED: %s\n' "$*" >&2; exit 1; }

export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 ANSIBLE_RETRY_FILES_ENABLED=0
export ANSIBLE_ROLES_PATH="$ROOT/ansible/roles"
export ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0
export PY_COLORS=0 NO_COLOR=1

# -- tools ---------------------------------------------------------------------------------------
step "tools"
if [ ! -x "$VENV/bin/python" ]; then
  note "no virtualenv at $VENV: creating it with scripts/bootstrap.sh"
  SPARKMILL_VENV="$VENV" "$ROOT/scripts/bootstrap.sh"
fi
if ! "$VENV/bin/ansible-playbook" --version >/dev/null 2>&1 ||
   ! "$VENV/bin/ansible-lint" --version >/dev/null 2>&1; then
  note "installing ansible-core and ansible-lint into $VENV"
  if ! out="$("$VENV/bin/python" -m pip install -q 'ansible-core>=2.17,<2.20' 'ansible-lint>=25,<27' 2>&1)"; then
    printf '%s\n' "$out" | tail -5 >&2
    if printf '%s' "$out" | grep -qiE 'NewConnectionError|Failed to establish|Name or service not known|Temporary failure in name resolution|Network is unreachable|No matching distribution found|Could not find a version'; then
      echo "check_deploy: SKIPPED: ansible-core/ansible-lint cannot be installed (no package index reachable)" >&2
      exit 77
    fi
    fail "pip could not install ansible-core/ansible-lint"
  fi
fi
PY="$VENV/bin/python"
PLAYBOOK="$VENV/bin/ansible-playbook"
note "$("$PLAYBOOK" --version 2>/dev/null | sed -n 1p), $("$VENV/bin/ansible-lint" --version 2>/dev/null | sed -n '1s/ using.*//p')"
HAVE_SYSTEMD_ANALYZE=0
if command -v systemd-analyze >/dev/null 2>&1; then
  HAVE_SYSTEMD_ANALYZE=1
  note "$(systemd-analyze --version | sed -n 1p)"
else
  note "systemd-analyze not found: the unit checks are skipped (apt-get install systemd)"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sparkmill-check-deploy.XXXXXX")"
cleanup() {
  local pid
  for pid in "${SMOKE_PID:-}" "${LINT_PID:-}" "${HA_PID:-}"; do
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  done
  if [ "${CHECK_DEPLOY_KEEP:-0}" = 1 ]; then echo "check_deploy: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
ME_USER="$(id -un)"
ME_GROUP="$(id -gn)"

# -- the static units are the templates rendered with the role's defaults ------------------------
step "deploy/systemd/ matches the role's templates"
mkdir -p "$WORK/rendered"
cat > "$WORK/render.ini" <<EOF
[dispatchers]
localhost
[resource_managers]
localhost
[job_masters]
localhost
[task_executors]
localhost
[all:vars]
ansible_connection=local
ansible_python_interpreter=$PY
EOF
"$PLAYBOOK" -i "$WORK/render.ini" "$ROOT/tests/deploy/render_units.yml" \
  -e "render_dir=$WORK/rendered" -e "render_owner=$ME_USER" -e "render_group=$ME_GROUP" \
  >"$WORK/render.log" 2>&1 || { cat "$WORK/render.log"; fail "rendering the unit templates failed"; }
if [ "$UPDATE_UNITS" = 1 ]; then
  mkdir -p "$ROOT/deploy/systemd"
  cp "$WORK"/rendered/* "$ROOT/deploy/systemd/"
  note "deploy/systemd/ rewritten: $(cd "$WORK/rendered" && echo *)"
  exit 0
fi
if ! diff -ru "$ROOT/deploy/systemd" "$WORK/rendered" >"$WORK/units.diff"; then
  cat "$WORK/units.diff"
  fail "deploy/systemd/ differs from the role's templates: edit the templates in ansible/roles/sparkmill/templates/, then run scripts/check_deploy.sh --update-units"
fi
note "$(ls "$ROOT/deploy/systemd" | tr '\n' ' ')"

# Unit checks. systemd-analyze verify fails a unit whose ExecStart= binary is missing, and
# /opt/sparkmill/venv/bin/sparkmill does not exist on a development machine: the static units are
# verified from a copy whose ExecStart= points at this checkout's $VENV/bin/sparkmill (the same
# program), and later the converged units, whose ExecStart= is the venv the role really built.
# Any message that names a sparkmill unit fails the check (unknown keys are only warnings).
verify_units() {  # DIR: verify every unit in it together, the template through its instance @1
  local dir="$1" out rc=0 units
  units="$(cd "$dir" && ls sparkmill.target sparkmill-*.service | sed -e 's/@[.]service$/@1.service/' -e 's|^|./|')"
  # shellcheck disable=SC2086  # one argument per unit
  out="$(cd "$dir" && systemd-analyze verify $units 2>&1)" || rc=$?
  if [ -n "$out" ]; then printf '%s\n' "$out" | sed 's/^/   | /'; fi
  [ "$rc" -eq 0 ] || fail "systemd-analyze verify failed for the units in $dir"
  if printf '%s' "$out" | grep -q 'sparkmill'; then fail "systemd-analyze verify complained about a unit in $dir"; fi
}
if [ "$HAVE_SYSTEMD_ANALYZE" = 1 ]; then
  step "systemd-analyze verify (static units, ExecStart= pointed at $VENV/bin/sparkmill)"
  mkdir -p "$WORK/verify-static"
  for f in "$ROOT"/deploy/systemd/*; do
    sed "s|^ExecStart=/opt/sparkmill/venv/bin/sparkmill |ExecStart=$VENV/bin/sparkmill |" "$f" \
      >"$WORK/verify-static/$(basename "$f")"
  done
  grep -q "^ExecStart=$VENV/bin/sparkmill " "$WORK/verify-static/sparkmill-dispatcher.service" ||
    fail "the ExecStart= rewrite for verification did not apply"
  verify_units "$WORK/verify-static"
  note "ok: sparkmill.target, 3 services, sparkmill-task-executor@1.service, sparkmill-pipeline-worker@1.service"

  # --threshold counts in tenths: 20 = an overall exposure of 2.0 (0 = locked down, 10 = none).
  step "systemd-analyze security --offline=true --threshold=20 (static units)"
  for unit in sparkmill-dispatcher.service sparkmill-resource-manager.service \
      sparkmill-job-master.service sparkmill-task-executor@1.service sparkmill-pipeline-worker@1.service; do
    out="$(cd "$WORK/verify-static" && systemd-analyze security --offline=true --threshold=20 "./$unit" 2>&1)" ||
      { printf '%s\n' "$out" | grep '✗' | sed 's/^/   | /'; fail "$unit: exposure above 2.0"; }
    note "$(printf '%s\n' "$out" | grep -o 'Overall exposure level.*' | sed 's/ [^ ]*$//')"
  done
fi

# -- playbook syntax and lint --------------------------------------------------------------------
step "ansible-playbook --syntax-check"
"$PLAYBOOK" -i "$ROOT/ansible/inventory.example.ini" --syntax-check \
  "$ROOT/ansible/site.yml" "$ROOT/ansible/rolling-restart.yml" >"$WORK/syntax.log" 2>&1 ||
  { cat "$WORK/syntax.log"; fail "ansible-playbook --syntax-check"; }
note "ok: ansible/site.yml, ansible/rolling-restart.yml"


# -- local converge ------------------------------------------------------------------------------
# A frozen copy of the checkout is the package source: the tree may change while this runs, and
# the idempotence check needs the same sources for both runs.
step "local converge of ansible/site.yml into $WORK/root"
"$PY" - "$ROOT" "$WORK/src" <<'EOF'
import shutil, sys
shutil.copytree(sys.argv[1], sys.argv[2], ignore=shutil.ignore_patterns(
    ".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"))
EOF
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
DISPATCHER_PORT="$(free_port)"
RM_PORT="$(free_port)"
INSTALL_PACKAGES=false
if [ "$(id -u)" -eq 0 ] && dpkg-query -W -f='${Status}\n' python3-venv python3-packaging openjdk-17-jre-headless 2>/dev/null |
    grep -c 'install ok installed' | grep -qx 3; then
  INSTALL_PACKAGES=true  # already installed: the apt task runs and must report no change
fi
# The modules run under Debian's own Python when there is one (it has python3-apt, and starts
# faster than a venv full of PySpark); set explicitly, as interpreter discovery may pick a
# pyenv shim that fails.
TARGET_PY="$PY"
if [ -x /usr/bin/python3 ]; then TARGET_PY=/usr/bin/python3; fi
export ANSIBLE_PIPELINING=1
R="$WORK/root"
cat > "$WORK/converge.ini" <<EOF
[dispatchers]
localhost sparkmill_host_address=127.0.0.1
[resource_managers]
localhost
[job_masters]
localhost
[task_executors]
localhost
[all:vars]
ansible_connection=local
ansible_python_interpreter=$TARGET_PY
EOF
cat > "$WORK/converge-vars.yml" <<EOF
sparkmill_become: false
sparkmill_manage_services: false
sparkmill_create_user: false
sparkmill_user: "$ME_USER"
sparkmill_group: "$ME_GROUP"
sparkmill_install_owner: "$ME_USER"
sparkmill_install_group: "$ME_GROUP"
sparkmill_install_packages: $INSTALL_PACKAGES
sparkmill_apt_update_cache: false
sparkmill_package: "$WORK/src"
sparkmill_wheel_build_dir: "$WORK/wheels"
sparkmill_install_root: "$R/opt/sparkmill"
sparkmill_config_dir: "$R/etc/sparkmill"
sparkmill_data_dir: "$R/var/lib/sparkmill"
sparkmill_log_dir: "$R/var/log/sparkmill"
sparkmill_pipeline_home: "$R/var/lib/sparkmill-pipeline"
sparkmill_pipeline_user: "$ME_USER"
sparkmill_pipeline_group: "$ME_GROUP"
sparkmill_exchange_group: "$ME_GROUP"
sparkmill_systemd_dir: "$R/etc/systemd/system"
sparkmill_dispatcher_port: $DISPATCHER_PORT
sparkmill_resource_manager_port: $RM_PORT
sparkmill_task_executors_per_host: 2
sparkmill_slots_per_task_executor: 3
sparkmill_environment:
  SPARK_LOCAL_IP: 127.0.0.1
EOF
# -- high availability: the zookeeper group turns it on ------------------------------------------
# Runs beside the local converge (its own configuration, data and secrets directories: nothing
# the converge writes), as does ansible-lint: each is one process on one core.
ha_rendering() {
  step "HA rendering: a zookeeper group gives high-availability.mode zookeeper and its quorum"
  cat "$WORK/converge.ini" - > "$WORK/converge-ha.ini" <<'EOF2'
[zookeeper]
zk-1.invalid
zk-2.invalid sparkmill_host_address=192.0.2.12
EOF2
  mkdir -p "$WORK/ha-etc"
  "$PLAYBOOK" -i "$WORK/converge-ha.ini" -e "@$WORK/converge-vars.yml" --tags sparkmill_checks,sparkmill_config \
    -e "sparkmill_config_dir=$WORK/ha-etc" -e "sparkmill_data_dir=$WORK/ha-data" \
    -e "sparkmill_secrets_dir=$WORK/ha-secrets" -e sparkmill_zookeeper_port=2281 "$ROOT/ansible/site.yml" \
    >"$WORK/ha.log" 2>&1 || { tail -30 "$WORK/ha.log"; fail "the HA configuration run failed"; }
  grep -qx 'high-availability.mode: zookeeper' "$WORK/ha-etc/sparkmill.yaml" || fail "HA mode not rendered"
  grep -qx 'high-availability.zookeeper.quorum: zk-1.invalid:2281,192.0.2.12:2281' "$WORK/ha-etc/sparkmill.yaml" ||
    { cat "$WORK/ha-etc/sparkmill.yaml"; fail "the ZooKeeper quorum was not rendered from the zookeeper group"; }
  grep -qx "security.zookeeper.digest-file: $WORK/ha-etc/keys/private/zookeeper-{role}.digest" "$WORK/ha-etc/sparkmill.yaml" &&
    grep -qx "security.zookeeper.identities-file: $WORK/ha-etc/keys/public/zookeeper.identities" "$WORK/ha-etc/sparkmill.yaml" ||
    { cat "$WORK/ha-etc/sparkmill.yaml"; fail "the per-role ZooKeeper identities were not rendered"; }
  (cd "$ROOT" && "$PY" -c "from sparkmill.common.config.configuration import Configuration; Configuration.load('$WORK/ha-etc/sparkmill.yaml')") ||
    fail "the HA configuration does not load"
  note "$(grep -E '^high-availability' "$WORK/ha-etc/sparkmill.yaml" | tr '\n' ' ')"
}

lint() {
  step "ansible-lint (profile production)"
  (cd "$ROOT" && "$VENV/bin/ansible-lint" -c ansible/.ansible-lint ansible/ tests/deploy/render_units.yml) \
    >"$WORK/lint.log" 2>&1 || { cat "$WORK/lint.log"; fail "ansible-lint"; }
  note "$(grep -E 'Passed|passed' "$WORK/lint.log" | tail -1)"
}

ha_rendering >"$WORK/ha-step.out" 2>&1 &
HA_PID=$!
lint >"$WORK/lint-step.out" 2>&1 &
LINT_PID=$!

converge() {  # NAME [ansible-playbook args...]: run site.yml, log to $WORK/NAME.log
  local name="$1"; shift
  local started=$SECONDS
  if ! "$PLAYBOOK" -i "$WORK/converge.ini" -e "@$WORK/converge-vars.yml" "$@" \
      "$ROOT/ansible/site.yml" >"$WORK/$name.log" 2>&1; then
    tail -40 "$WORK/$name.log"
    return 1
  fi
  note "$name: $(grep -E '^localhost +:' "$WORK/$name.log" | sed 's/  */ /g') ($((SECONDS - started)) s)"
}
converge converge-1 || fail "the first converge failed"
converge converge-2 || fail "the second converge failed"
changed="$(grep -E '^localhost +:' "$WORK/converge-2.log" | sed -E 's/.*changed=([0-9]+).*/\1/')"
if [ "$changed" != 0 ]; then
  grep -B1 -E '^changed:' "$WORK/converge-2.log" | sed 's/^/   | /'
  fail "not idempotent: the second converge changed $changed task(s)"
fi
note "idempotent: the second converge changed nothing"
[ "$INSTALL_PACKAGES" = true ] || note "(the apt task was skipped: not root, or the packages are not installed yet)"

# -- what the converge installed -------------------------------------------------------------------
step "installed files"
for unit in sparkmill.target sparkmill-dispatcher.service sparkmill-resource-manager.service \
    sparkmill-job-master.service sparkmill-task-executor@.service sparkmill-pipeline-worker@.service \
    sparkmill-pipeline-worker@.socket; do
  [ -f "$R/etc/systemd/system/$unit" ] || fail "unit $unit was not installed into $R/etc/systemd/system"
done
# The pipeline user gets through the data directory to the exchange and data directories only.
modes="$(cd "$R/var/lib" && stat -c '%a %n' sparkmill sparkmill/exchange sparkmill/data sparkmill-pipeline | tr '\n' ' ')"
[ "$modes" = "710 sparkmill 2770 sparkmill/exchange 2770 sparkmill/data 700 sparkmill-pipeline " ] ||
  fail "unexpected directory modes: $modes"
note "directories: $modes"
grep -q "^ExecStart=$R/opt/sparkmill/venv/bin/sparkmill dispatcher --config $R/etc/sparkmill/dispatcher.yaml$" \
  "$R/etc/systemd/system/sparkmill-dispatcher.service" || fail "the dispatcher unit's ExecStart= is not the converged venv"
note "units: $(ls "$R/etc/systemd/system" | tr '\n' ' ')"
for conf in sparkmill.yaml dispatcher.yaml resource-manager.yaml job-master.yaml task-executor-1.yaml \
    task-executor-2.yaml; do
  [ -f "$R/etc/sparkmill/$conf" ] || fail "$conf was not rendered"
  (cd "$ROOT" && "$PY" -c "from sparkmill.common.config.configuration import Configuration; Configuration.load('$R/etc/sparkmill/$conf')") ||
    fail "$conf does not load with sparkmill's validation"
done
[ ! -e "$R/etc/sparkmill/task-executor-3.yaml" ] || fail "a third task executor configuration exists"
"$PY" - "$R/etc/sparkmill" "$DISPATCHER_PORT" <<'EOF' || fail "the rendered configuration has unexpected values"
import sys
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.config import options as opt
etc, port = sys.argv[1], int(sys.argv[2])
conf = Configuration.load(f"{etc}/sparkmill.yaml")
assert conf.get(opt.DISPATCHER_RPC_ADDRESS) == f"tcp://127.0.0.1:{port}", conf.get(opt.DISPATCHER_RPC_ADDRESS)
assert conf.get(opt.TASK_MANAGER_NUM_TASK_SLOTS) == 3
assert conf.get(opt.HA_MODE) == "none"
assert conf.get(opt.METRICS_PORT) == 0  # three services share the file on this host
own = [Configuration.load(f"{etc}/{role}.yaml") for role in ("dispatcher", "resource-manager", "job-master")]
assert [c.get(opt.METRICS_PORT) for c in own] == [9249, 9250, 9251], [c.get(opt.METRICS_PORT) for c in own]
assert own[0].get(opt.DISPATCHER_RPC_ADDRESS) == conf.get(opt.DISPATCHER_RPC_ADDRESS)
te = [Configuration.load(f"{etc}/task-executor-{i}.yaml") for i in (1, 2)]
assert [c.get(opt.METRICS_PORT) for c in te] == [9260, 9261], [c.get(opt.METRICS_PORT) for c in te]
assert te[1].to_strings()["taskmanager.pipeline-worker.socket"] == "/run/sparkmill-pipeline-worker/2.sock"
assert "spark.conf.spark.local.dir" not in te[1].to_strings()  # the worker's private /tmp
print("   sparkmill.yaml, the services' own files and task-executor-{1,2}.yaml load with sparkmill.common.config.configuration and hold the expected values")
EOF
"$R/opt/sparkmill/venv/bin/python" -c "from sparkmill.common.config.configuration import Configuration; Configuration.load('$R/etc/sparkmill/sparkmill.yaml')" ||
  fail "the installed venv cannot load the configuration"
note "the installed venv ($R/opt/sparkmill/venv) loads it too"

if [ "$HAVE_SYSTEMD_ANALYZE" = 1 ]; then
  step "systemd-analyze verify (converged units, ExecStart= = the installed venv)"
  verify_units "$R/etc/systemd/system"
  note "ok"
fi

# -- the installed program behaves as the units assume ---------------------------------------------
step "installed dispatcher: starts, SIGTERM -> exit 0; bad configuration -> exit 2"
SMOKE_LOG="$WORK/dispatcher.log"
SPARK_LOCAL_IP=127.0.0.1 "$R/opt/sparkmill/venv/bin/sparkmill" dispatcher --config "$R/etc/sparkmill/sparkmill.yaml" \
  >"$SMOKE_LOG" 2>&1 &
SMOKE_PID=$!
for _ in $(seq 1 150); do
  grep -q "listening on" "$SMOKE_LOG" && break
  kill -0 "$SMOKE_PID" 2>/dev/null || break
  sleep 0.2
done
grep -q "listening on" "$SMOKE_LOG" || { cat "$SMOKE_LOG"; fail "the dispatcher did not start listening within 30 s"; }
note "$(grep -m1 'listening on' "$SMOKE_LOG" | sed 's/^.*INFO *//')"
kill -TERM "$SMOKE_PID"
rc=0
for _ in $(seq 1 300); do kill -0 "$SMOKE_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SMOKE_PID" 2>/dev/null; then fail "the dispatcher did not stop within 30 s of SIGTERM"; fi
wait "$SMOKE_PID" || rc=$?
SMOKE_PID=""
[ "$rc" -eq 0 ] || { cat "$SMOKE_LOG"; fail "the dispatcher exited $rc after SIGTERM (want 0)"; }
note "SIGTERM: stopped with exit code 0"
sed 's/^heartbeat.timeout: .*/heartbeat.timeout: 1 s/' "$R/etc/sparkmill/sparkmill.yaml" >"$WORK/bad.yaml"
rc=0
"$R/opt/sparkmill/venv/bin/sparkmill" dispatcher --config "$WORK/bad.yaml" >"$WORK/bad.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$WORK/bad.log"; fail "a bad configuration gave exit code $rc (the units' RestartPreventExitStatus=2 expects 2)"; }
note "bad configuration: exit code 2 ($(head -1 "$WORK/bad.log" | cut -c1-110))"

# -- the role refuses a bad value before it reaches the file -----------------------------------------
step "the role validates the configuration before writing it"
before="$(sha256sum "$R/etc/sparkmill/sparkmill.yaml")"
if "$PLAYBOOK" -i "$WORK/converge.ini" -e "@$WORK/converge-vars.yml" --tags sparkmill_config \
    -e '{"sparkmill_config_extra": {"heartbeat.timeout": "1 s"}}' "$ROOT/ansible/site.yml" \
    >"$WORK/bad-value.log" 2>&1; then
  fail "the role accepted heartbeat.timeout: 1 s (not greater than heartbeat.interval)"
fi
grep -q "heartbeat.timeout" "$WORK/bad-value.log" || { tail -20 "$WORK/bad-value.log"; fail "the failure does not name the key"; }
[ "$before" = "$(sha256sum "$R/etc/sparkmill/sparkmill.yaml")" ] || fail "the bad configuration replaced the file"
note "refused, naming heartbeat.timeout; sparkmill.yaml left as it was"

step "on-demand task executors: authorized_keys' from= takes addresses, never host names"
if "$PLAYBOOK" -i "$WORK/converge.ini" -e "@$WORK/converge-vars.yml" --tags sparkmill_checks \
    -e '{"sparkmill_elastic": true, "sparkmill_elastic_rm_from": ["rm-1.example"]}' \
    "$ROOT/ansible/site.yml" >"$WORK/elastic-name.log" 2>&1; then
  fail "the role accepted a host name for authorized_keys' from= (sshd matches addresses only)"
fi
grep -q "sparkmill_elastic_rm_from" "$WORK/elastic-name.log" ||
  { tail -20 "$WORK/elastic-name.log"; fail "the refusal does not say what to set"; }
"$PLAYBOOK" -i "$WORK/converge.ini" -e "@$WORK/converge-vars.yml" --tags sparkmill_checks \
  -e '{"sparkmill_elastic": true, "sparkmill_elastic_rm_from": ["127.0.0.1", "10.0.0.0/8", "::1"]}' \
  "$ROOT/ansible/site.yml" >"$WORK/elastic-ip.log" 2>&1 ||
  { tail -30 "$WORK/elastic-ip.log"; fail "the role refused IP addresses for from="; }
note "a name is refused, naming sparkmill_elastic_rm_from; addresses and ranges pass"

# -- fewer task executors: the surplus instance's configuration goes ------------------------------
step "sparkmill_task_executors_per_host 2 -> 1 removes task-executor-2.yaml"
"$PLAYBOOK" -i "$WORK/converge.ini" -e "@$WORK/converge-vars.yml" --tags sparkmill_config \
  -e sparkmill_task_executors_per_host=1 "$ROOT/ansible/site.yml" >"$WORK/shrink.log" 2>&1 ||
  { tail -30 "$WORK/shrink.log"; fail "the run with one task executor failed"; }
[ -f "$R/etc/sparkmill/task-executor-1.yaml" ] || fail "task-executor-1.yaml was removed"
[ ! -e "$R/etc/sparkmill/task-executor-2.yaml" ] || fail "task-executor-2.yaml is still there"
note "ok (with sparkmill_manage_services the instance is also stopped and disabled)"

# -- the steps that ran beside the converge ---------------------------------------------------------
background_step() {  # PID NAME OUT: its output, and its failure as this script's
  local rc=0
  wait "$1" || rc=$?
  cat "$3"
  [ "$rc" -eq 0 ] || fail "$2 (above)"
}
background_step "$LINT_PID" "ansible-lint" "$WORK/lint-step.out"
LINT_PID=""
background_step "$HA_PID" "the HA rendering" "$WORK/ha-step.out"
HA_PID=""

printf '\ncheck_deploy: all deployment checks passed\n'
