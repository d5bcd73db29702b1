#!/usr/bin/env bash
# Launches and stops a local blockmgr cluster: one bm-master and N bm-workers, each with its own
# port, memory budget and disk directory. Logs, pid files and disk dirs live in one run folder.
#
#   deploy/cluster.sh start [--workers N] [--memory SIZE] [--disk-limit SIZE] [--port P]
#                           [--heartbeat-timeout S] [--http-port H] [--run-dir DIR] [--bin DIR]
#                           [--insecure] [--masters M]
#   deploy/cluster.sh status [--run-dir DIR]
#   deploy/cluster.sh stop   [--run-dir DIR]
#
# The master listens on 127.0.0.1:P (default 7700), worker i on 127.0.0.1:P+i.
# With --http-port H the master serves its web pages, REST and /metrics on 127.0.0.1:H and
# worker i its /metrics on 127.0.0.1:H+i.
# `start` prints the master address and writes it to RUN_DIR/master.addr. The cluster runs with
# CURVE keys made in RUN_DIR/keys (kept across restarts); `. RUN_DIR/env` sets BLOCKMGR_KEY and
# BLOCKMGR_MASTER_KEY so bmctl uses the admin key. --insecure runs without keys.
# With --masters M (2 or more; docs/standby-masters.md) it also starts a ZooKeeper on
# 127.0.0.1:P+90 (RUN_DIR/zookeeper: zoo.cfg with 250 ms ticks, and its data, kept across
# restarts so the epoch keeps growing) and M masters elected through it, master m on
# 127.0.0.1:P+100*(m-1) with its journal in RUN_DIR/state-m<m> (and pages on H+100*(m-1));
# master.addr and BLOCKMGR_MASTER in RUN_DIR/env then list them all.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cmd="${1:-}"
[ -n "$cmd" ] && shift || true

workers=2
memory=256MiB
disk_limit=""
port=7700
hb_timeout=10
http_port=""
run_dir="$root/run"
bin="${BM_BIN:-$root/build/bin}"
insecure=0
masters=1

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --memory) memory="$2"; shift 2 ;;
    --disk-limit) disk_limit="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --heartbeat-timeout) hb_timeout="$2"; shift 2 ;;
    --http-port) http_port="$2"; shift 2 ;;
    --run-dir) run_dir="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --insecure) insecure=1; shift ;;
    --masters) masters="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "cluster.sh: unknown option $1" >&2; usage ;;
  esac
done

case "$masters" in
  '' | *[!0-9]* | 0) echo "cluster.sh: --masters takes a number (1 or more)" >&2; exit 2 ;;
esac
zk_port=$((port + 90))
zk_dir="$run_dir/zookeeper"
master_addrs=()
for m in $(seq 1 "$masters"); do master_addrs+=("tcp://127.0.0.1:$((port + 100 * (m - 1)))"); done
master=$(IFS=,; echo "${master_addrs[*]}")

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Workers first, ZooKeeper last: a master that stops resigns through it.
stop_all() {
  local stopped=0
  for pidfile in "$run_dir"/worker-*.pid "$run_dir"/master*.pid "$run_dir"/zookeeper.pid; do
    [ -f "$pidfile" ] || continue
    if alive "$pidfile"; then
      kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
      for _ in $(seq 50); do alive "$pidfile" || break; sleep 0.1; done
      alive "$pidfile" && kill -KILL "$(cat "$pidfile")" 2>/dev/null || true
      stopped=$((stopped + 1))
    fi
    rm -f "$pidfile"
  done
  echo "cluster: stopped $stopped process(es)"
}

# Exits (stopping the rest) when a process of the cluster has exited, with its log's tail.
exit_if_one_died() {
  for pidfile in "$run_dir"/*.pid; do
    if ! alive "$pidfile"; then
      name=$(basename "$pidfile" .pid)
      echo "cluster.sh: $name exited; its log:" >&2; tail -5 "$run_dir/$name.log" >&2
      stop_all >/dev/null; exit 1
    fi
  done
}

# ZooKeeper's answer to "srvr" on 127.0.0.1:PORT; empty when nothing answers.
zookeeper_srvr() {
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && cat <&3' _ "$1" \
    2>/dev/null || true
}

# A standalone ZooKeeper for the masters' election, from Debian's `zookeeper` package. Its data
# stays in the run folder: the epoch it keeps must only grow, as workers refuse older ones.
start_zookeeper() {
  if ! command -v java >/dev/null || [ ! -f /usr/share/java/zookeeper.jar ]; then
    echo "cluster.sh: --masters $masters needs ZooKeeper (apt-get install zookeeper)" >&2; exit 1
  fi
  if [ -n "$(zookeeper_srvr "$zk_port")" ]; then
    echo "cluster.sh: something already serves 127.0.0.1:$zk_port; choose another --port" >&2
    exit 1
  fi
  mkdir -p "$zk_dir/data"
  # Ticks of 250 ms allow sessions from 0.5 s (2 ticks); with the stock 2000 ms the shortest
  # is 4 s, and a failover takes at least that long.
  printf '%s\n' "tickTime=250" "minSessionTimeout=500" "maxSessionTimeout=30000" \
    "dataDir=$zk_dir/data" "clientPort=$zk_port" "clientPortAddress=127.0.0.1" \
    "admin.enableServer=false" "4lw.commands.whitelist=srvr,ruok" >"$zk_dir/zoo.cfg"
  java -Xmx256m -cp '/usr/share/java/*' org.apache.zookeeper.server.quorum.QuorumPeerMain \
    "$zk_dir/zoo.cfg" >"$run_dir/zookeeper.log" 2>&1 &
  echo $! >"$run_dir/zookeeper.pid"
  for _ in $(seq 300); do
    zookeeper_srvr "$zk_port" | grep -q 'Mode: standalone' && return 0
    exit_if_one_died
    sleep 0.1
  done
  echo "cluster.sh: ZooKeeper does not serve on 127.0.0.1:$zk_port; see $run_dir/zookeeper.log" >&2
  stop_all >/dev/null; exit 1
}

# Masters elected through ZooKeeper (docs/standby-masters.md), sharing the master key. The
# first leads: the others start once it does.
start_elected_masters() {
  start_zookeeper
  for m in $(seq 1 "$masters"); do
    args=(--listen "${master_addrs[m - 1]}" "${master_args[@]}" --id "m$m"
          --zookeeper "127.0.0.1:$zk_port" --session-timeout 1.5 --state-dir "$run_dir/state-m$m")
    [ -n "$http_port" ] && args+=(--http "127.0.0.1:$((http_port + 100 * (m - 1)))")
    "$bin/bm-master" "${args[@]}" >"$run_dir/master-m$m.log" 2>&1 &
    echo $! >"$run_dir/master-m$m.pid"
    [ "$m" = 1 ] || continue
    for _ in $(seq 100); do
      "$bin/bmctl" --master "${master_addrs[0]}" --timeout 1 masters >/dev/null 2>&1 && break
      exit_if_one_died
      sleep 0.1
    done
  done
}

case "$cmd" in
  start)
    for b in bm-master bm-worker bmctl; do
      [ -x "$bin/$b" ] || { echo "cluster.sh: $bin/$b not found; build first (deploy/build.sh)" >&2; exit 1; }
    done
    mkdir -p "$run_dir"
    for pidfile in "$run_dir"/master*.pid "$run_dir"/zookeeper.pid; do
      if alive "$pidfile"; then
        echo "cluster.sh: a cluster is already running from $run_dir (stop it first)" >&2; exit 1
      fi
    done
    if [ "$masters" = 1 ] && compgen -G "$run_dir/disk-w*/LEADER_EPOCH" >/dev/null; then
      # A lone master sends epoch 0, which workers that followed an elected leader refuse.
      echo "cluster.sh: the workers in $run_dir followed elected masters; start it with" \
        "--masters again, or use another --run-dir" >&2
      exit 1
    fi
    keys="$run_dir/keys"
    master_security=()
    if [ $insecure = 0 ]; then
      # One key per process plus an admin key for bmctl; keys/ is every node's allow-list.
      for name in master admin $(seq -f "w%g" 1 "$workers"); do
        role=worker
        case "$name" in master) role=master ;; admin) role=admin ;; esac
        [ -f "$keys/$name.key_secret" ] || "$bin/bmctl" keygen "$name" --role "$role" --out "$keys" >/dev/null
      done
      master_security=(--key "$keys/master.key_secret" --allow "$keys")
      printf 'export BLOCKMGR_KEY=%q\nexport BLOCKMGR_MASTER_KEY=%q\n' \
        "$keys/admin.key_secret" "$keys/master.key" >"$run_dir/env"
      export BLOCKMGR_KEY="$keys/admin.key_secret" BLOCKMGR_MASTER_KEY="$keys/master.key"
    else
      : >"$run_dir/env"
      unset BLOCKMGR_KEY BLOCKMGR_MASTER_KEY
    fi
    master_args=(--heartbeat-timeout "$hb_timeout" "${master_security[@]}")
    if [ "$masters" = 1 ]; then
      args=(--listen "$master" "${master_args[@]}")
      [ -n "$http_port" ] && args+=(--http "127.0.0.1:$http_port")
      "$bin/bm-master" "${args[@]}" >"$run_dir/master.log" 2>&1 &
      echo $! >"$run_dir/master.pid"
    else
      start_elected_masters
      echo "export BLOCKMGR_MASTER='$master'" >>"$run_dir/env"
    fi
    echo "$master" >"$run_dir/master.addr"
    for i in $(seq 1 "$workers"); do
      args=(--master "$master" --listen "tcp://127.0.0.1:$((port + i))" --memory "$memory"
            --disk-dir "$run_dir/disk-w$i" --id "w$i")
      [ -n "$disk_limit" ] && args+=(--disk-limit "$disk_limit")
      [ $insecure = 0 ] && args+=(--key "$keys/w$i.key_secret" --master-key "$keys/master.key"
                                  --allow "$keys")
      [ -n "$http_port" ] && args+=(--http "127.0.0.1:$((http_port + i))")
      "$bin/bm-worker" "${args[@]}" >"$run_dir/worker-w$i.log" 2>&1 &
      echo $! >"$run_dir/worker-w$i.pid"
    done
    # Wait until the master lists every worker.
    for _ in $(seq 100); do
      n=$("$bin/bmctl" --master "$master" --timeout 1 --json workers 2>/dev/null | grep -o '"id"' | wc -l || true)
      [ "$n" = "$workers" ] && break
      exit_if_one_died
      sleep 0.1
    done
    if [ "$n" != "$workers" ]; then
      echo "cluster.sh: only $n of $workers workers registered; logs in $run_dir" >&2
      stop_all >/dev/null; exit 1
    fi
    if [ "$masters" != 1 ]; then
      # Every standby in sync: it holds the leader's journal and could take over.
      for _ in $(seq 100); do
        n=$("$bin/bmctl" --master "$master" --timeout 1 --json masters 2>/dev/null |
          grep -c '"in_sync": true' || true)
        [ "$n" = "$masters" ] && break
        exit_if_one_died
        sleep 0.1
      done
      if [ "$n" != "$masters" ]; then
        echo "cluster.sh: only $n of $masters masters in sync; logs in $run_dir" >&2
        stop_all >/dev/null; exit 1
      fi
    fi
    what="master $master"
    [ "$masters" != 1 ] && what="masters $master (ZooKeeper 127.0.0.1:$zk_port)"
    if [ $insecure = 0 ]; then
      echo "cluster: $what with $workers worker(s), keys on; logs in $run_dir"
      echo "cluster: for bmctl: . $run_dir/env"
    else
      echo "cluster: $what with $workers worker(s), no keys; logs in $run_dir"
      [ "$masters" != 1 ] && echo "cluster: for bmctl: . $run_dir/env"
    fi
    if [ -n "$http_port" ]; then
      echo "cluster: status pages at http://127.0.0.1:$http_port/"
    fi
    ;;
  status)
    [ -f "$run_dir/env" ] && . "$run_dir/env"
    for pidfile in "$run_dir"/zookeeper.pid "$run_dir"/master*.pid "$run_dir"/worker-*.pid; do
      [ -f "$pidfile" ] || continue
      name=$(basename "$pidfile" .pid)
      if alive "$pidfile"; then echo "$name: running (pid $(cat "$pidfile"))"; else echo "$name: not running"; fi
    done
    if [ -f "$run_dir/zookeeper.pid" ] && [ -f "$run_dir/master.addr" ]; then
      "$bin/bmctl" --master "$(cat "$run_dir/master.addr")" --timeout 2 masters || true
    fi
    [ -f "$run_dir/master.addr" ] && "$bin/bmctl" --master "$(cat "$run_dir/master.addr")" --timeout 2 workers || true
    ;;
  stop)
    stop_all
    ;;
  *)
    usage
    ;;
esac
