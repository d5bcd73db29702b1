#!/usr/bin/env bash
# Launches and stops a local blockmgr cluster: one bm-master and N bm-workers, each with its own
# port, memory budget and disk directory. Logs, pid files and disk dirs live in one run folder.
#
#   deploy/cluster.sh start [--workers N] [--memory SIZE] [--disk-limit SIZE] [--port P]
#                           [--heartbeat-timeout S] [--http-port H] [--run-dir DIR] [--bin DIR]
#                           [--insecure]
#   deploy/cluster.sh status [--run-dir DIR]
#   deploy/cluster.sh stop   [--run-dir DIR]
#
# The master listens on 127.0.0.1:P (default 7700), worker i on 127.0.0.1:P+i.
# With --http-port H the master serves its web pages, REST and /metrics on 127.0.0.1:H and
# worker i its /metrics on 127.0.0.1:H+i.
# `start` prints the master address and writes it to RUN_DIR/master.addr. The cluster runs with
# CURVE keys made in RUN_DIR/keys (kept across restarts); `. RUN_DIR/env` sets BLOCKMGR_KEY and
# BLOCKMGR_MASTER_KEY so bmctl uses the admin key. --insecure runs without keys.
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

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

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
    -h|--help) usage ;;
    *) echo "cluster.sh: unknown option $1" >&2; usage ;;
  esac
done

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_all() {
  local stopped=0
  for pidfile in "$run_dir"/worker-*.pid "$run_dir"/master.pid; do
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

case "$cmd" in
  start)
    for b in bm-master bm-worker bmctl; do
      [ -x "$bin/$b" ] || { echo "cluster.sh: $bin/$b not found; build first (deploy/build.sh)" >&2; exit 1; }
    done
    mkdir -p "$run_dir"
    if alive "$run_dir/master.pid"; then
      echo "cluster.sh: a cluster is already running from $run_dir (stop it first)" >&2; exit 1
    fi
    master="tcp://127.0.0.1:$port"
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
    master_args=(--listen "$master" --heartbeat-timeout "$hb_timeout" "${master_security[@]}")
    [ -n "$http_port" ] && master_args+=(--http "127.0.0.1:$http_port")
    "$bin/bm-master" "${master_args[@]}" >"$run_dir/master.log" 2>&1 &
    echo $! >"$run_dir/master.pid"
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
      for pidfile in "$run_dir"/*.pid; do
        if ! alive "$pidfile"; then
          name=$(basename "$pidfile" .pid)
          echo "cluster.sh: $name exited; its log:" >&2; tail -5 "$run_dir/$name.log" >&2
          stop_all >/dev/null; exit 1
        fi
      done
      sleep 0.1
    done
    if [ "$n" != "$workers" ]; then
      echo "cluster.sh: only $n of $workers workers registered; logs in $run_dir" >&2
      stop_all >/dev/null; exit 1
    fi
    if [ $insecure = 0 ]; then
      echo "cluster: master $master with $workers worker(s), keys on; logs in $run_dir"
      echo "cluster: for bmctl: . $run_dir/env"
    else
      echo "cluster: master $master with $workers worker(s), no keys; logs in $run_dir"
    fi
    if [ -n "$http_port" ]; then
      echo "cluster: status pages at http://127.0.0.1:$http_port/"
    fi
    ;;
  status)
    [ -f "$run_dir/env" ] && . "$run_dir/env"
    for pidfile in "$run_dir"/master.pid "$run_dir"/worker-*.pid; do
      [ -f "$pidfile" ] || continue
      name=$(basename "$pidfile" .pid)
      if alive "$pidfile"; then echo "$name: running (pid $(cat "$pidfile"))"; else echo "$name: not running"; fi
    done
    [ -f "$run_dir/master.addr" ] && "$bin/bmctl" --master "$(cat "$run_dir/master.addr")" --timeout 2 workers || true
    ;;
  stop)
    stop_all
    ;;
  *)
    usage
    ;;
esac
