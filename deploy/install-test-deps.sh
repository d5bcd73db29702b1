#!/usr/bin/env bash
# Installs what only the tests use, when missing: headless Chromium (renders the status pages),
# the Prometheus server (scrapes /metrics), clang (the ThreadSafetyAnalysis test) and a ZooKeeper
# server with a Java runtime (the leader election and failover tests), podman with runc and
# catatonit (the images of deploy/image and the pods of deploy/k8s: K8sPlayTest) and
# python3-venv (a fresh venv for `pip install ./python`: PythonPackageTest). Tests that
# need them skip, saying so, where they cannot be installed; a failed install here is therefore
# reported but not fatal.
set -uo pipefail

# fonts-dejavu-core: the storage page screenshot needs a font to draw its text with.
# zookeeper: only the server's jars and scripts (Debian's zookeeperd would run it as a service);
# the tests start their own on a free loopback port.
# runc: podman's default runtime, crun, fails on hosts with cgroups v1 or hybrid
# (deploy/k8s/kube-play.sh picks runc there). catatonit: the pause process of podman's pods.
packages=(chromium fonts-dejavu-core prometheus clang zookeeper default-jre-headless
          podman runc catatonit python3-venv python3-pip)

. "$(dirname "${BASH_SOURCE[0]}")/apt_packages.sh"
# The Prometheus package would start a server on :9090 where an init system runs; the tests
# start their own on a free loopback port.
if ! install_missing_packages install-test-deps "${packages[@]}"; then
  echo "install-test-deps: could not install ${packages[*]}; the tests that need them will skip" >&2
fi
exit 0
