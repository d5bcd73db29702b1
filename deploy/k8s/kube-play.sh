#!/usr/bin/env bash
# Runs deploy/k8s on this machine with podman: kube-play.yaml (a ZooKeeper, two masters elected
# through it, three workers) on the podman network `blockmgr`, each pod at the address of its
# blockmgr.io/ip annotation. Build the images first (deploy/image/build.sh).
#
#   deploy/k8s/kube-play.sh up     # then: bmctl --master "$(deploy/k8s/kube-play.sh masters)" workers
#   deploy/k8s/kube-play.sh down
#   deploy/k8s/kube-play.sh masters
#
# On a host whose cgroups are v1 or hybrid, where podman's default runtime (crun) fails, it runs
# podman with podman-cgroupv1.conf (runc, cgroupfs) unless CONTAINERS_CONF names a file.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
manifest="$here/kube-play.yaml"
network=blockmgr
subnet=10.89.77.0/24

if [ -z "${CONTAINERS_CONF:-}" ] && [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ]; then
  export CONTAINERS_CONF="$here/podman-cgroupv1.conf"
fi

# The names of the file's pods.
pods() { awk '/^kind: /{ pod = ($2 == "Pod") } pod && /^  name: /{ print $2 }' "$manifest"; }

# The annotation's addresses, in the order of the pods in the file (podman's --ip order).
addresses() { sed -n 's/^ *blockmgr\.io\/ip: *//p' "$manifest"; }

case "${1:-}" in
  up)
    command -v podman >/dev/null || { echo "kube-play.sh: needs podman" >&2; exit 1; }
    if ! podman network exists "$network"; then
      podman network create --subnet "$subnet" "$network" >/dev/null
    fi
    ips=()
    for ip in $(addresses); do ips+=(--ip "$ip"); done
    # Without systemd podman cannot schedule the probes' health checks and says so per pod.
    podman kube play --network "$network" "${ips[@]}" "$manifest" 2>&1 >/dev/null |
      grep -v -e 'unable to get systemd connection' -e 'No more static macs' >&2 || true
    # The pods' containers, all running (a failed start is reported above, the pod left
    # created).
    for pod in $(pods); do
      state=$(podman pod inspect --format '{{.State}}' "$pod" 2>/dev/null || echo missing)
      if [ "$state" != Running ]; then
        echo "kube-play.sh: pod $pod is $state (podman logs $pod-<container>)" >&2
        exit 1
      fi
    done
    echo "kube-play: pods started; masters $("$0" masters)"
    ;;
  down)
    # Pod by pod: kube down stops at a pod already removed by hand (a test's killed pod).
    for pod in $(pods); do
      podman pod rm -f --ignore "$pod" 2>&1 >/dev/null | grep -v 'unable to get systemd connection' >&2 || true
    done
    echo "kube-play: pods removed"
    ;;
  masters)
    sed -n 's/^ *- --advertise=\(tcp:\/\/[0-9.]*:7077\)$/\1/p' "$manifest" | paste -sd,
    ;;
  *)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
