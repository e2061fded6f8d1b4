#!/usr/bin/env bash
# A test bed of Debian 12 hosts booted with systemd (systemd-nspawn) for ansible/site.yml:
#
#   scripts/testbed.sh up [N]     # start N hosts (default 5), print where the inventory is
#   scripts/testbed.sh prepare    # only build the cached root, wheelhouse and venv layer `up` needs
#   scripts/testbed.sh status     # hosts, addresses and whether systemd runs in them
#   scripts/testbed.sh down       # remove every container, mount and the bridge `up` made
#
# Faults (tests/testbed/faults.py drives them): each takes a host hN and optionally a
# number of seconds after which it is undone by itself; `heal-all` undoes every fault in force.
#
#   scripts/testbed.sh poweroff hN [S] | poweron hN   # kill the container at once | boot it again
#   scripts/testbed.sh partition hN [S] | heal hN     # cut its link off the bridge (both ways)
#   scripts/testbed.sh pause hN [S] | resume hN       # SIGSTOP every process of the host | SIGCONT
#   scripts/testbed.sh zk-stop hN [S] | zk-start hN   # stop | start the host's ZooKeeper server
#   scripts/testbed.sh faults | heal-all              # the faults in force | undo all of them
#
# Hosts h1..hN get 198.18.0.11.. on the bridge smbr0 (198.18.0.1 on this machine; see NET below); nothing
# routes beyond it. Each host's root is an overlay over one cached Debian root (debootstrap,
# built once per package list under $SPARKMILL_TESTBED_CACHE); the hosts reach a directory
# shared by all of them, mounted at the same path as here (the "NFS" mount of exchange.dir, sinks
# and the HA storage), and a read-only wheelhouse, since they have no package index. Ansible
# connects as root over SSH with a key made for this test bed.
#
# Exit codes: 0 ok; 1 failed (what was made is removed again); 77 this machine cannot run the
# test bed (not root, no systemd-nspawn/debootstrap, no Debian mirror) - the reason is printed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPARKMILL_VENV:-$ROOT/.venv}"
CACHE="${SPARKMILL_TESTBED_CACHE:-/var/cache/sparkmill-testbed}"
STATE="${SPARKMILL_TESTBED_STATE:-/var/lib/sparkmill-testbed}"
MIRROR="${SPARKMILL_TESTBED_MIRROR:-http://deb.debian.org/debian}"
# A second bed can run beside the first with its own /24 of 198.18.0.0/15, bridge and state
# directory (SPARKMILL_TESTBED_NET=198.18.1 SPARKMILL_TESTBED_BRIDGE=smbr1 SPARKMILL_TESTBED_STATE=...).
BRIDGE="${SPARKMILL_TESTBED_BRIDGE:-smbr0}"
NET="${SPARKMILL_TESTBED_NET:-198.18.0}"
[[ "$NET" =~ ^198\.1[89]\.([0-9]{1,3})$ ]] && [ "${BASH_REMATCH[1]}" -le 255 ] ||
  { echo "[testbed] FAILED: SPARKMILL_TESTBED_NET must be a /24 inside 198.18.0.0/15, e.g. 198.18.1" >&2; exit 1; }
[[ "$BRIDGE" =~ ^[a-z0-9]{1,15}$ ]] ||
  { echo "[testbed] FAILED: SPARKMILL_TESTBED_BRIDGE must be a short interface name" >&2; exit 1; }
CONTROLLER_ADDRESS="$NET.1"
SHARED="$STATE/shared"
WHEELS="$CACHE/wheels"
# Everything the play installs with apt is in the root already: the hosts have no network beyond
# the bridge. python3-apt lets Ansible's apt module see that.
PACKAGES=(systemd systemd-sysv dbus iproute2 procps openssh-server sudo python3 python3-apt python3-packaging
  python3-venv openjdk-17-jre-headless zookeeper libslf4j-java prometheus)
# Bump when the customisation below changes: the cache key covers it.
ROOT_RECIPE=1

log() { printf '[testbed] %s\n' "$*" >&2; }
cannot() { printf '[testbed] CANNOT RUN: %s\n' "$*" >&2; exit 77; }
die() { printf '[testbed] FAILED: %s\n' "$*" >&2; exit 1; }

host_address() { echo "$NET.$((10 + $1))"; }

preflight() {
  [ "$(id -u)" -eq 0 ] || cannot "needs root (containers, bridge and overlay mounts)"
  command -v systemd-nspawn >/dev/null 2>&1 || cannot "systemd-nspawn is missing (apt-get install systemd-container)"
  command -v ip >/dev/null 2>&1 || cannot "ip is missing (apt-get install iproute2)"
  command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 ||
    cannot "ssh/ssh-keygen are missing (apt-get install openssh-client)"
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
  grep -qw overlay /proc/filesystems || cannot "the kernel has no overlay filesystem"
}

# -- the cached root ------------------------------------------------------------------------------
root_key() { printf '%s\n' "bookworm" "$ROOT_RECIPE" "${PACKAGES[@]}" | sha256sum | cut -c1-12; }

build_root() {  # prints the root's path
  local dir tmp started=$SECONDS
  dir="$CACHE/root-$(root_key)"
  if [ -f "$dir/.testbed-complete" ]; then echo "$dir"; return; fi
  command -v debootstrap >/dev/null 2>&1 || cannot "debootstrap is missing (apt-get install debootstrap)"
  mkdir -p "$CACHE"
  tmp="$dir.building"
  rm -rf "$tmp"
  log "building the Debian 12 root $dir (debootstrap, a few minutes)"
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
      bookworm "$tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1; then
    tail -5 "$CACHE/debootstrap.log" >&2
    rm -rf "$tmp"
    if grep -qiE 'Failed getting release file|Couldn.t download|Temporary failure resolving|unable to resolve' "$CACHE/debootstrap.log"; then
      cannot "debootstrap cannot reach the Debian mirror $MIRROR"
    fi
    die "debootstrap failed (log: $CACHE/debootstrap.log)"
  fi
  # Addresses come from systemd-networkd (a .network file per host); Debian's prometheus
  # package enables its service, which only the monitoring host should run (the play decides).
  chroot "$tmp" systemctl enable systemd-networkd.service >/dev/null 2>&1
  chroot "$tmp" systemctl disable prometheus.service >/dev/null 2>&1 || true
  # Each host gets its own machine id at first boot.
  : >"$tmp/etc/machine-id"
  rm -f "$tmp/var/lib/dbus/machine-id"
  chroot "$tmp" apt-get clean
  touch "$tmp/.testbed-complete"
  mv "$tmp" "$dir"
  # Roots of other package lists are stale: each is over a gigabyte.
  find "$CACHE" -maxdepth 1 -name 'root-*' ! -path "$dir" -exec rm -rf {} +
  log "root built in $((SECONDS - started)) s"
  echo "$dir"
}

# The wheels of sparkmill's dependencies, at the versions of this checkout's virtualenv.
build_wheels() {
  local key
  key="$(cat "$ROOT/pyproject.toml" <("$VENV/bin/python" -m pip freeze --exclude-editable 2>/dev/null) | sha256sum | cut -c1-12)"
  if [ -f "$WHEELS/.key" ] && [ "$(cat "$WHEELS/.key")" = "$key" ]; then return; fi
  log "building the wheelhouse $WHEELS"
  rm -rf "$WHEELS.building"
  mkdir -p "$WHEELS.building"
  "$VENV/bin/python" -m pip freeze --exclude-editable >"$WHEELS.building/.constraints" 2>/dev/null
  "$VENV/bin/python" -m pip wheel -q -w "$WHEELS.building" -c "$WHEELS.building/.constraints" \
    "$ROOT" >"$CACHE/wheels.log" 2>&1 || { tail -5 "$CACHE/wheels.log" >&2; die "pip wheel failed"; }
  rm -f "$WHEELS.building"/sparkmill-*.whl  # the play builds and ships sparkmill itself
  echo "$key" >"$WHEELS.building/.key"
  rm -rf "$WHEELS"
  mv "$WHEELS.building" "$WHEELS"
}

# The role's default virtualenv (sparkmill_venv), with sparkmill's dependencies from the
# wheelhouse installed, as an overlay layer above the root: like a machine image with the
# Python dependencies baked in. The play still creates the virtualenv when it is missing and
# installs what is missing (scripts/check_deploy.sh converges from nothing); here it finds them
# and installs only sparkmill's own wheel, which saves five virtualenvs and five installs of
# PySpark in every bed's first converge (about 30 s on two cores). Prints the layer's path.
HOST_VENV=/opt/sparkmill/venv
build_venv_layer() {  # ROOT
  local root="$1" dir tmp key wheel started=$SECONDS
  key="$(printf '%s\n' "$root" "$(cat "$WHEELS/.key")" "$HOST_VENV" | sha256sum | cut -c1-12)"
  dir="$CACHE/venv-$key"
  if [ -f "$dir/.testbed-complete" ]; then echo "$dir"; return; fi
  tmp="$CACHE/venv-building"
  unmount_below "$tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp/upper" "$tmp/work" "$tmp/merged"
  mount -t overlay overlay -o "lowerdir=$root,upperdir=$tmp/upper,workdir=$tmp/work" "$tmp/merged"
  mkdir -p "$tmp/merged/opt/testbed-wheels"
  mount --bind -o ro "$WHEELS" "$tmp/merged/opt/testbed-wheels"
  mount -t proc proc "$tmp/merged/proc"
  local rc=0 wheels=()
  for wheel in "$WHEELS"/*.whl; do wheels+=("/opt/testbed-wheels/${wheel##*/}"); done
  {
    chroot "$tmp/merged" /usr/bin/python3 -m venv "$HOST_VENV" &&
      chroot "$tmp/merged" "$HOST_VENV/bin/pip" install -q --no-cache-dir --no-index "${wheels[@]}"
  } >"$CACHE/venv.log" 2>&1 || rc=$?
  unmount_below "$tmp"
  if [ "$rc" -ne 0 ]; then
    tail -5 "$CACHE/venv.log" >&2
    rm -rf "$tmp"
    die "the hosts' virtualenv layer could not be built (log: $CACHE/venv.log)"
  fi
  # Only the virtualenv is the layer's: not the mount points made for building it.
  rmdir "$tmp/upper/opt/testbed-wheels" "$tmp/upper/proc" 2>/dev/null || true
  rm -rf "$tmp/upper/tmp" "$tmp/upper/root"  # pip's scratch space, copied up
  touch "$tmp/upper/.testbed-complete"
  find "$CACHE" -maxdepth 1 -name 'venv-*' ! -name venv-building -exec rm -rf {} +
  mv "$tmp/upper" "$dir"
  rm -rf "$tmp"
  log "the hosts' virtualenv layer built in $((SECONDS - started)) s"
  echo "$dir"
}

unmount_below() {  # DIR: unmount whatever is mounted under DIR, deepest first
  local mnt
  for mnt in $(findmnt -rn -o TARGET | grep -F "$1/" | sort -r); do
    umount "$mnt" 2>/dev/null || umount -l "$mnt"
  done
}

# The cached root and the wheelhouse, built at the same time: debootstrap mostly waits for the
# mirror and the disk, pip for the disk, so on a fresh machine the two take about as long as
# the root alone; then the virtualenv layer above the root. Prints the overlay's lower
# directories (the layer first).
prepare() {
  local wheels_pid rc=0 root layer
  build_wheels &
  wheels_pid=$!
  root="$(build_root)" || rc=$?
  if [ "$rc" -ne 0 ]; then
    kill "$wheels_pid" 2>/dev/null || true
    wait "$wheels_pid" 2>/dev/null || true
    exit "$rc"
  fi
  wait "$wheels_pid" || die "the wheelhouse could not be built (log: $CACHE/wheels.log)"
  layer="$(build_venv_layer "$root")"
  echo "$layer:$root"
}

cmd_prepare() {
  preflight
  [ -x "$VENV/bin/python" ] || cannot "no virtualenv at $VENV (run scripts/bootstrap.sh)"
  local started=$SECONDS
  prepare >/dev/null
  log "prepare: root, wheelhouse and virtualenv layer ready in $((SECONDS - started)) s"
}

# -- hosts ------------------------------------------------------------------------------------------
nspawn_pids() {  # the systemd-nspawn processes of this test bed (their command line names $STATE)
  local pid
  for pid in $(pgrep -x systemd-nspawn || true); do
    if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q -- "-D $STATE/hosts/"; then echo "$pid"; fi
  done
}

container_pid() {  # HOST: the pid of the host's systemd (child of its systemd-nspawn)
  local npid
  npid="$(cat "$STATE/hosts/$1/nspawn.pid" 2>/dev/null)" || return 1
  pgrep -P "$npid" | head -1
}

prepare_host() {  # INDEX LOWER
  local i="$1" lower="$2" h="h$1" d addr
  d="$STATE/hosts/$h"
  addr="$(host_address "$i")"
  mkdir -p "$d/upper" "$d/work" "$d/root"
  mount -t overlay overlay -o "lowerdir=$lower,upperdir=$d/upper,workdir=$d/work" "$d/root"
  echo "$h" >"$d/root/etc/hostname"
  od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$d/root/etc/machine-id"
  {
    echo "127.0.0.1 localhost"
    echo "$CONTROLLER_ADDRESS controller"
    for j in $(seq 1 "$COUNT"); do echo "$(host_address "$j") h$j"; done
  } >"$d/root/etc/hosts"
  # Same name as systemd's DHCP default for containers, which this file replaces.
  cat >"$d/root/etc/systemd/network/80-container-host0.network" <<EOF
[Match]
Name=host0

[Network]
Address=$addr/24
LinkLocalAddressing=no
IPv6AcceptRA=no
EOF
  # systemd in a container sometimes fails to attach a freshly started unit to its cgroup
  # ("Failed at step CGROUP ... No such file or directory"), seen with networkd-wait-online
  # when the play's first sparkmill unit pulls in network-online.target: the host would stay
  # "degraded" for a transient of the container, not of anything deployed. Retry it.
  mkdir -p "$d/root/etc/systemd/system/systemd-networkd-wait-online.service.d"
  printf '%s\n' '[Unit]' 'StartLimitIntervalSec=0' '' '[Service]' 'Restart=on-failure' 'RestartSec=1' \
    >"$d/root/etc/systemd/system/systemd-networkd-wait-online.service.d/testbed-retry.conf"
  install -d -m 0700 "$d/root/root/.ssh"
  install -m 0600 "$STATE/id_ed25519.pub" "$d/root/root/.ssh/authorized_keys"
}

start_host() {  # INDEX
  local h="h$1" d
  d="$STATE/hosts/$h"
  # setsid: the container outlives this script; its console goes to a file.
  setsid systemd-nspawn -D "$d/root" -b --console=pipe --register=no --keep-unit \
    --machine="sm-$BRIDGE-$h" --hostname="$h" --network-bridge="$BRIDGE" \
    --bind="$SHARED:$SHARED" --bind-ro="$WHEELS:/opt/testbed-wheels" \
    </dev/null >"$d/console.log" 2>&1 &
  echo $! >"$d/nspawn.pid"
}

ssh_opts() {
  echo "-i $STATE/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null" \
    "-o LogLevel=ERROR -o BatchMode=yes -o ConnectTimeout=3"
}

wait_hosts() {
  local deadline=$((SECONDS + ${SPARKMILL_TESTBED_BOOT_TIMEOUT:-180})) i
  for i in $(seq 1 "$COUNT"); do wait_host "$i" "$deadline"; done
}

wait_host() {  # INDEX DEADLINE (in $SECONDS): until systemd runs in the host and SSH answers
  local i="$1" deadline="$2" state retried=""
  while :; do
    # shellcheck disable=SC2046  # one word per option
    state="$(ssh $(ssh_opts) "root@$(host_address "$i")" systemctl is-system-running 2>/dev/null || true)"
    if [ "$state" = degraded ] && [ "${retried:-}" != "h$i" ]; then
      # Under heavy load a unit of the base system sometimes fails at boot with 219/CGROUP
      # (systemd's hybrid cgroup tree in a container): start the failed units once more.
      retried="h$i"
      log "h$i: degraded at boot ($(ssh $(ssh_opts) "root@$(host_address "$i")" \
        'f="$(systemctl --failed --plain --no-legend | cut -d" " -f1 | tr "\n" " ")"; echo $f;
         systemctl reset-failed; [ -z "$f" ] || systemctl restart $f' 2>/dev/null || true)), retrying"
      continue
    fi
    case "$state" in running | degraded) break ;; esac
    if ! kill -0 "$(cat "$STATE/hosts/h$i/nspawn.pid")" 2>/dev/null; then
      tail -20 "$STATE/hosts/h$i/console.log" >&2
      die "host h$i stopped while booting"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -20 "$STATE/hosts/h$i/console.log" >&2
      die "host h$i did not boot with SSH within the time limit (state: ${state:-no answer})"
    fi
    sleep 1
  done
  log "h$i $(host_address "$i"): $state"
}

write_inventory() {
  local n="$COUNT" i last
  last="h$n"
  {
    echo "# Written by scripts/testbed.sh up: the test bed's hosts and groups."
    echo "[testbed]"
    for i in $(seq 1 "$n"); do echo "h$i ansible_host=$(host_address "$i")"; done
    echo "[zookeeper]"
    for i in 1 2 3; do echo "h$i"; done
    echo "[dispatchers]"; echo h1; echo h2
    echo "[resource_managers]"; echo h1; echo h2
    echo "[job_masters]"; echo h3; echo h4
    echo "[task_executors]"
    for i in $(seq $((n - 2)) "$n"); do echo "h$i"; done
    echo "[monitoring]"; echo "$last"
  } >"$STATE/inventory.ini"
  mkdir -p "$STATE/group_vars"
  cat >"$STATE/group_vars/all.yml" <<EOF
# Written by scripts/testbed.sh up.
ansible_user: root
ansible_python_interpreter: /usr/bin/python3
ansible_ssh_private_key_file: $STATE/id_ed25519
ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR
# The hosts have no package index: Debian packages are in their root, wheels in a read-only mount.
sparkmill_apt_update_cache: false
zookeeper_apt_update_cache: false
prometheus_apt_update_cache: false
# With 6 s sessions (below), a ZooKeeper server cut off with its host must notice it lost the
# ensemble's leader within 2 s, not the role's 5: only then does a client connected to it see
# SUSPENDED early enough for its grace to end before its session can expire and a successor lead
# (zookeeper_sync_limit in ansible/roles/zookeeper/defaults/main.yml).
zookeeper_sync_limit: 2
sparkmill_pip_extra_args: --no-index --find-links /opt/testbed-wheels
# The shared directory every host mounts at the same path (an NFS mount in a real cluster).
sparkmill_exchange_dir: $SHARED/exchange
sparkmill_ha_storage_dir: $SHARED/ha
# Job input and output: the pipeline workers (sparkmill-pipeline) read and write it, the job
# masters clean sinks' temporaries there.
sparkmill_pipeline_data_dirs: [$SHARED/work]
sparkmill_environment:
  SPARK_LOCAL_IP: "{{ ansible_host }}"
  # The task executors' Spark JVMs run jobs of a few rows and restart often here: C1 alone and
  # the serial collector halve their start-up CPU on the bed's two shared cores (tests/conftest.py).
  SPARK_SUBMIT_OPTS: -XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC
# Few, small Spark JVMs: the test bed shares two cores.
sparkmill_task_executors_per_host: 1
sparkmill_slots_per_task_executor: 2
sparkmill_task_executor_stable_ids: true
sparkmill_heartbeat_interval: 2 s
sparkmill_heartbeat_timeout: 10 s
sparkmill_restart_sec: 2
# rolling-restart.yml waits until each restarted service is ready (its metrics) and then
# counts systemd's restarts of it: a short settle still sees a service that fails right away.
sparkmill_restart_settle_seconds: 2
# Task executors on demand: the whole machinery is installed (the template unit, the resource
# managers' SSH key behind the systemctl gate, the hosts' host keys) and the second converge
# proves it idempotent, but the resource managers' driver stays off (resourcemanager.driver
# below): the scenarios meet the fixed task executors only, and tests/testbed/test_elastic_hosts.py
# turns the driver on in the resource managers' files for its own run.
sparkmill_elastic: true
sparkmill_elastic_slots_per_host: 2
sparkmill_config_extra:
  resourcemanager.driver: none
  # Sessions of a few seconds: a killed leader is replaced quickly (zookeeper_tick_time 1000).
  high-availability.zookeeper.client.session-timeout: 6 s
  # Jobs outlive the restart of the task executors they run on (rolling-restart.yml).
  restart-strategy.type: fixed-delay
  restart-strategy.fixed-delay.attempts: 20
  restart-strategy.fixed-delay.delay: 2 s
prometheus_scrape_interval: 5s
prometheus_scrape_timeout: 4s
prometheus_evaluation_interval: 5s
EOF
}

# -- faults -----------------------------------------------------------------------------------------
# Each fault in force is a file $FAULTS/<kind>-<host> (kind: poweroff, partition, pause, zk-stop), so
# `faults` lists them and `heal-all` undoes them, whoever made them.
FAULTS="$STATE/faults"

host_index() {  # hN -> N, refusing anything that is not a host of this bed
  [[ "${1:-}" =~ ^h([0-9]{1,2})$ ]] || die "not a host name: '${1:-}' (h1..hN)"
  [ -f "$STATE/hosts.count" ] || die "the test bed is down"
  [ "${BASH_REMATCH[1]}" -ge 1 ] && [ "${BASH_REMATCH[1]}" -le "$(cat "$STATE/hosts.count")" ] ||
    die "no host $1 in this test bed (h1..h$(cat "$STATE/hosts.count"))"
  echo "${BASH_REMATCH[1]}"
}

host_veth() {  # HOST: the bridge-side end of the host's link (the peer of host0 in the container)
  local cpid peer dev
  cpid="$(container_pid "$1")" || die "$1 is not running"
  # "2: host0@if17: <...>": 17 is the index of the other end, on this machine.
  peer="$(nsenter -t "$cpid" -n ip -o link show dev host0 | sed -n 's/^[0-9]*: host0@if\([0-9]*\):.*/\1/p')"
  [ -n "$peer" ] || die "$1 has no host0 link"
  dev="$(ip -o link show | sed -n "s/^$peer: \([^:@]*\).*/\1/p")"
  [ -n "$dev" ] || die "the bridge side of $1's link (ifindex $peer) is not on this machine"
  echo "$dev"
}

host_pids() {  # HOST: every process of the host (its pid namespace), init first
  local cpid ns pid
  cpid="$(container_pid "$1")" || return 0
  ns="$(readlink "/proc/$cpid/ns/pid")"
  echo "$cpid"
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$pid" != "$cpid" ] && [ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null)" = "$ns" ] && echo "$pid"
  done
  return 0
}

mark_fault() {  # KIND HOST: record the fault with a token of its own (see undo_later)
  mkdir -p "$FAULTS"
  od -An -N8 -tx1 /dev/urandom | tr -d ' \n' >"$FAULTS/$1-$2"
}

undo_later() {  # SECONDS KIND COMMAND HOST: `testbed.sh COMMAND HOST` after SECONDS, detached -
  # unless the fault was undone meanwhile (its token is gone, or belongs to a later fault).
  [ -z "${1:-}" ] && return 0
  [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "not a number of seconds: '$1'"
  local token
  token="$(cat "$FAULTS/$2-$4")"
  setsid bash -c '
    sleep "$1"
    [ "$(cat "$2" 2>/dev/null)" = "$3" ] || exit 0
    exec bash "$4" "$5" "$6"' undo "$1" "$FAULTS/$2-$4" "$token" "$ROOT/scripts/testbed.sh" "$3" "$4" \
    </dev/null >>"$FAULTS/undo.log" 2>&1 &
  log "$4: $3 in $1 s at the latest"
}

alive() {  # PID: running (a zombie waiting to be reaped is not)
  local state
  state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

host_ssh() {  # HOST COMMAND...
  local h="$1"; shift
  # shellcheck disable=SC2046
  ssh $(ssh_opts) "root@$(host_address "$(host_index "$h")")" "$@"
}

cmd_poweroff() {  # HOST [SECONDS]: like pulling the plug - no unit stops, no socket is closed
  local i cpid npid
  i="$(host_index "$1")"
  mkdir -p "$FAULTS"
  npid="$(cat "$STATE/hosts/$1/nspawn.pid" 2>/dev/null || true)"
  cpid="$(container_pid "$1" || true)"
  if [ -n "$cpid" ]; then kill -KILL "$cpid"; fi  # the namespace's init: the kernel kills the rest
  if [ -n "$npid" ]; then
    kill -KILL "$npid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$npid" || break; sleep 0.1; done
  fi
  rm -f "$FAULTS/pause-$1" "$FAULTS/partition-$1"  # a powered-off host is neither
  mark_fault poweroff "$1"
  log "$1 ($(host_address "$i")): powered off"
  undo_later "${2:-}" poweroff poweron "$1"
}

cmd_poweron() {  # HOST: boot it again (its overlay root is kept) and wait until systemd runs
  local i npid
  i="$(host_index "$1")"
  npid="$(cat "$STATE/hosts/$1/nspawn.pid" 2>/dev/null || true)"
  if [ -n "$npid" ] && alive "$npid"; then
    log "$1: already running"
  else
    start_host "$i"
    wait_host "$i" $((SECONDS + ${SPARKMILL_TESTBED_BOOT_TIMEOUT:-180}))
  fi
  rm -f "$FAULTS/poweroff-$1"
  log "$1 ($(host_address "$i")): powered on"
}

cmd_partition() {  # HOST [SECONDS]: its link leaves the bridge; the link itself stays up
  local i veth
  i="$(host_index "$1")"
  mkdir -p "$FAULTS"
  veth="$(host_veth "$1")"
  ip link set dev "$veth" nomaster
  mark_fault partition "$1"
  log "$1 ($(host_address "$i")): partitioned ($veth off $BRIDGE)"
  undo_later "${2:-}" partition heal "$1"
}

cmd_heal() {  # HOST
  local i veth
  i="$(host_index "$1")"
  if [ -f "$FAULTS/partition-$1" ] || container_pid "$1" >/dev/null; then
    veth="$(host_veth "$1" 2>/dev/null || true)"
    if [ -n "$veth" ]; then ip link set dev "$veth" master "$BRIDGE"; fi
  fi
  rm -f "$FAULTS/partition-$1"
  log "$1 ($(host_address "$i")): healed"
}

cmd_pause() {  # HOST [SECONDS]: every process stops where it is (the kernel still answers ARP)
  local i pid round
  i="$(host_index "$1")"
  mkdir -p "$FAULTS"
  container_pid "$1" >/dev/null || die "$1 is not running"
  # Twice: a process forked while the first round went through is stopped by the second.
  for round in 1 2; do
    for pid in $(host_pids "$1"); do kill -STOP "$pid" 2>/dev/null || true; done
  done
  : "$round"
  mark_fault pause "$1"
  log "$1 ($(host_address "$i")): paused"
  undo_later "${2:-}" pause resume "$1"
}

cmd_resume() {  # HOST
  local i pid
  i="$(host_index "$1")"
  for pid in $(host_pids "$1"); do kill -CONT "$pid" 2>/dev/null || true; done
  rm -f "$FAULTS/pause-$1"
  log "$1 ($(host_address "$i")): resumed"
}

cmd_zk_stop() {  # HOST [SECONDS]
  host_index "$1" >/dev/null
  mkdir -p "$FAULTS"
  host_ssh "$1" systemctl stop zookeeper-sparkmill.service || die "$1: cannot stop ZooKeeper"
  mark_fault zk-stop "$1"
  log "$1: ZooKeeper stopped"
  undo_later "${2:-}" zk-stop zk-start "$1"
}

cmd_zk_start() {  # HOST
  host_index "$1" >/dev/null
  host_ssh "$1" systemctl start zookeeper-sparkmill.service || die "$1: cannot start ZooKeeper"
  rm -f "$FAULTS/zk-stop-$1"
  log "$1: ZooKeeper started"
}

cmd_faults() {
  local f
  [ -d "$FAULTS" ] || return 0
  for f in "$FAULTS"/poweroff-* "$FAULTS"/partition-* "$FAULTS"/pause-* "$FAULTS"/zk-stop-*; do
    [ -e "$f" ] && basename "$f"
  done
  return 0
}

cmd_heal_all() {  # undo every fault in force: power on, heal, resume, then start ZooKeeper
  local f kind host
  [ -d "$FAULTS" ] || return 0
  for kind in poweroff partition pause zk-stop; do
    for f in "$FAULTS/$kind"-*; do
      [ -e "$f" ] || continue
      host="${f##*-}"
      case "$kind" in
        poweroff) cmd_poweron "$host" ;;
        partition) cmd_heal "$host" ;;
        pause) cmd_resume "$host" ;;
        zk-stop) cmd_zk_start "$host" ;;
      esac
    done
  done
}

# -- commands ---------------------------------------------------------------------------------------
stop_undo_timers() {  # the pending undo timers (undo_later): each is a session of its own, so
  # its sleep goes with it. They would act on nothing once the fault files are gone, but they
  # would stay around for up to their whole delay.
  local pid
  for pid in $(pgrep -f " undo [0-9.]+ $FAULTS/" || true); do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
}

cmd_down() {
  local pid mnt i
  stop_undo_timers
  for pid in $(nspawn_pids); do kill -TERM "$pid" 2>/dev/null || true; done
  for i in $(seq 1 60); do
    [ -z "$(nspawn_pids)" ] && break
    # A second SIGTERM makes systemd-nspawn stop the container at once.
    if [ "$i" = 20 ]; then for pid in $(nspawn_pids); do kill -TERM "$pid" 2>/dev/null || true; done; fi
    if [ "$i" = 40 ]; then for pid in $(nspawn_pids); do kill -KILL "$pid" 2>/dev/null || true; done; fi
    sleep 0.5
  done
  [ -z "$(nspawn_pids)" ] || die "containers still running: $(nspawn_pids | tr '\n' ' ')"
  # Deepest mounts first.
  for mnt in $(awk -v s="$STATE/" 'index($2, s) == 1 { print $2 }' /proc/self/mounts | sort -r); do
    umount "$mnt" 2>/dev/null || umount -l "$mnt"
  done
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE"; fi
  rm -rf "$STATE"
}

cmd_up() {
  COUNT="${1:-${SPARKMILL_TESTBED_HOSTS:-5}}"
  [[ "$COUNT" =~ ^[0-9]+$ ]] && [ "$COUNT" -ge 5 ] && [ "$COUNT" -le 40 ] ||
    die "the number of hosts must be 5..40 (the inventory needs 5)"
  preflight
  [ -x "$VENV/bin/python" ] || cannot "no virtualenv at $VENV (run scripts/bootstrap.sh)"
  local started=$SECONDS lower i
  # Whatever an earlier, killed run left behind goes first.
  cmd_down
  UP_DONE=0
  trap 'if [ "$UP_DONE" != 1 ]; then log "up failed: removing what it made"; cmd_down; fi' EXIT
  lower="$(prepare)"
  mkdir -p "$STATE/hosts" "$SHARED/work"
  chmod 1777 "$SHARED/work"
  ssh-keygen -q -t ed25519 -N '' -C sparkmill-testbed -f "$STATE/id_ed25519"
  ip link add "$BRIDGE" type bridge
  ip addr add "$CONTROLLER_ADDRESS/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq 1 "$COUNT"); do prepare_host "$i" "$lower"; done
  for i in $(seq 1 "$COUNT"); do start_host "$i"; done
  wait_hosts
  write_inventory
  echo "$COUNT" >"$STATE/hosts.count"
  UP_DONE=1
  log "up: $COUNT hosts in $((SECONDS - started)) s; inventory $STATE/inventory.ini"
  echo "$STATE/inventory.ini"
}

cmd_status() {
  if [ ! -f "$STATE/hosts.count" ]; then echo "down"; return 3; fi
  local i addr state rc=0
  for i in $(seq 1 "$(cat "$STATE/hosts.count")"); do
    addr="$(host_address "$i")"
    # shellcheck disable=SC2046
    state="$(ssh $(ssh_opts) "root@$addr" systemctl is-system-running 2>/dev/null || true)"
    echo "h$i $addr ${state:-unreachable}"
    case "$state" in running | degraded) ;; *) rc=1 ;; esac
  done
  echo "inventory: $STATE/inventory.ini"
  return "$rc"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  prepare) cmd_prepare ;;
  down) [ "$(id -u)" -eq 0 ] || cannot "needs root"; cmd_down; log "down" ;;
  status) cmd_status ;;
  poweroff | poweron | partition | heal | pause | resume | zk-stop | zk-start)
    [ "$(id -u)" -eq 0 ] || cannot "needs root"
    [ -n "${2:-}" ] || die "$1: which host? (h1..hN)"
    cmd="cmd_${1//-/_}"; shift; "$cmd" "$@" ;;
  faults) cmd_faults ;;
  heal-all) [ "$(id -u)" -eq 0 ] || cannot "needs root"; cmd_heal_all ;;
  *) echo "usage: $0 up [N] | prepare | down | status | poweroff|poweron|partition|heal|pause|resume|zk-stop|zk-start hN [S] | faults | heal-all" >&2; exit 2 ;;
esac
