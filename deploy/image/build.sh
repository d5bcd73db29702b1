#!/usr/bin/env bash
# Builds the images the Kubernetes manifests run (deploy/k8s) with podman, from this machine's
# own files: no base image is pulled, so no registry needs to be reachable.
#
#   deploy/image/build.sh [--bin DIR] [--tag TAG] [--zookeeper-tag TAG] [--no-zookeeper]
#
# blockmgr:VERSION (--tag): FROM scratch with bm-master, bm-worker and bmctl from DIR (default
# build/bin; stripped), the shared libraries they load as this machine's loader resolves them
# (installed Debian packages), dash as /bin/sh and chown (the workers' shell command and init
# container), the user blockmgr (999) and its data folders. /usr/share/blockmgr/packages.txt
# lists the Debian packages the files came from.
#
# blockmgr-zookeeper:VERSION (--zookeeper-tag): Debian's zookeeper package, its jars and the
# Java runtime from default-jre-headless; zookeeper.yaml runs it (unless --no-zookeeper).
#
# Build the binaries first: deploy/build.sh --target bm-master --target bm-worker --target bmctl
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
version=$(sed -n 's/^project(blockmgr VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
bin="$root/build/bin"
tag="blockmgr:$version"
zookeeper_tag="blockmgr-zookeeper:$version"
zookeeper=1

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --zookeeper-tag) zookeeper_tag="$2"; shift 2 ;;
    --no-zookeeper) zookeeper=0; shift ;;
    -h|--help) usage ;;
    *) echo "image/build.sh: unknown option $1" >&2; usage ;;
  esac
done

command -v podman >/dev/null || {
  echo "image/build.sh: needs podman (deploy/install-test-deps.sh installs it)" >&2; exit 1; }
for b in bm-master bm-worker bmctl; do
  [ -x "$bin/$b" ] || { echo "image/build.sh: $bin/$b not found; build it first" >&2; exit 1; }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# Copies FILE to ROOTFS at DEST (default: its own path) and every shared library it loads, at
# the path the loader found it (so the image's loader finds it there too), and notes the Debian
# source of each in ROOTFS/.sources (write_package_list names their packages).
add_with_libraries() {
  local rootfs="$1" file="$2" dest="${3:-$2}" lib
  mkdir -p "$rootfs$(dirname "$dest")"
  cp -L "$file" "$rootfs$dest"
  echo "$file" >>"$rootfs/.sources"
  # ldd prints "libx.so.1 => /path/libx.so.1 (0x...)" and the loader's own path alone.
  for lib in $(ldd "$file" | sed -n 's/.*=> \(\/[^ ]*\).*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (.*/\1/p'); do
    if [ ! -e "$rootfs$lib" ]; then
      mkdir -p "$rootfs$(dirname "$lib")"
      cp -L "$lib" "$rootfs$lib"
      echo "$lib" >>"$rootfs/.sources"
    fi
  done
}

# The Debian packages (name and version) the image's files came from, one a line.
write_package_list() {
  local rootfs="$1" out="$2" f pkg
  mkdir -p "$(dirname "$out")"
  sort -u "$rootfs/.sources" | while read -r f; do
    # dpkg knows a file by the path its package installed it at, which with Debian's merged
    # /usr may be /bin/... or /lib/... for /usr/bin/... or /usr/lib/..., or a link's target.
    f=$(readlink -f "$f")
    pkg=$(dpkg -S "$f" 2>/dev/null || dpkg -S "${f#/usr}" 2>/dev/null || true)
    pkg=${pkg%%:*}
    if [ -n "$pkg" ]; then dpkg-query -W -f='${Package} ${Version}\n' "$pkg"; fi
  done | sort -u >"$out"
  rm -f "$rootfs/.sources"
}

# /etc/passwd and /etc/group with root and one service user.
write_users() {
  local rootfs="$1" user="$2" id="$3"
  mkdir -p "$rootfs/etc" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\n%s:x:%s:%s::/var/lib/%s:/usr/sbin/nologin\n' \
    "$user" "$id" "$id" "$user" >"$rootfs/etc/passwd"
  printf 'root:x:0:\n%s:x:%s:\n' "$user" "$id" >"$rootfs/etc/group"
  # glibc's own files and dns lookups (built into libc since 2.34): /etc/hosts first, which
  # podman and Kubernetes write, then the cluster's DNS.
  echo 'hosts: files dns' >"$rootfs/etc/nsswitch.conf"
}

# Builds the context CTX with CONTAINERFILE as TAG, and removes the image TAG named before if
# nothing else names or runs it: rebuilding leaves no untagged image behind.
podman_build() {
  local containerfile="$1" tag="$2" ctx="$3" before after
  before=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
  podman build --quiet -f "$containerfile" -t "$tag" \
    --label "org.opencontainers.image.version=$version" "$ctx" >/dev/null
  after=$(podman image inspect --format '{{.Id}}' "$tag")
  if [ -n "$before" ] && [ "$before" != "$after" ]; then
    podman rmi "$before" >/dev/null 2>&1 || true  # still named or used elsewhere: kept
  fi
}

build_blockmgr() {
  local ctx="$stage/blockmgr" rootfs="$stage/blockmgr/rootfs" b
  mkdir -p "$rootfs/usr/bin" "$ctx/state/master" "$ctx/state/worker"
  for b in bm-master bm-worker bmctl; do
    add_with_libraries "$rootfs" "$bin/$b" "/usr/bin/$b"
    strip --strip-unneeded "$rootfs/usr/bin/$b"
    sed -i "\|^$bin/$b\$|d" "$rootfs/.sources"  # built here, not from a package
  done
  # Debian 12 merges /bin into /usr/bin: the image has both names.
  add_with_libraries "$rootfs" /usr/bin/dash
  add_with_libraries "$rootfs" /usr/bin/chown
  mkdir -p "$rootfs/bin"
  ln -s /usr/bin/dash "$rootfs/bin/sh"
  ln -s /usr/bin/chown "$rootfs/bin/chown"
  write_users "$rootfs" blockmgr 999
  write_package_list "$rootfs" "$rootfs/usr/share/blockmgr/packages.txt"
  podman_build "$root/deploy/image/Containerfile" "$tag" "$ctx"
}

build_zookeeper() {
  local ctx="$stage/zookeeper" rootfs="$stage/zookeeper/rootfs" java_home jar lib
  [ -f /usr/share/java/zookeeper.jar ] || {
    echo "image/build.sh: needs Debian's zookeeper package (deploy/install-test-deps.sh)" >&2
    exit 1; }
  java_home=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
  mkdir -p "$rootfs/opt" "$rootfs/usr/share/java" "$ctx/data" "$rootfs/conf"
  # The runtime with its symbolic links into /etc/java-* resolved (and those to what the
  # headless runtime lacks, such as src.zip, left out).
  python3 -c 'import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2], ignore_dangling_symlinks=True)' \
    "$java_home" "$rootfs/opt/java"
  add_with_libraries "$rootfs" "$java_home/bin/java" /opt/java/bin/java
  for lib in "$java_home"/lib/server/libjvm.so "$java_home"/lib/*.so; do
    add_with_libraries "$rootfs" "$lib" "/opt/java/${lib#"$java_home"/}"
  done 2>/dev/null
  # zookeeper.jar names its dependencies in its manifest's Class-Path, and they theirs.
  for jar in $(python3 - /usr/share/java/zookeeper.jar <<'PY'
import os, sys, zipfile
todo, seen = [sys.argv[1]], []
while todo:
    jar = todo.pop()
    if jar in seen or not os.path.exists(jar):  # optional ones may be missing (jline)
        continue
    seen.append(jar)
    manifest = zipfile.ZipFile(jar).read("META-INF/MANIFEST.MF").decode()
    for line in manifest.replace("\r\n", "\n").replace("\n ", "").splitlines():
        if line.startswith("Class-Path:"):
            todo += line[len("Class-Path:"):].split()
print("\n".join(seen))
PY
  ); do
    cp -L "$jar" "$rootfs$jar"
    echo "$jar" >>"$rootfs/.sources"
  done
  echo "$java_home/lib/modules" >>"$rootfs/.sources"
  write_users "$rootfs" zookeeper 1000
  write_package_list "$rootfs" "$rootfs/usr/share/blockmgr/packages.txt"
  podman_build "$root/deploy/image/Containerfile.zookeeper" "$zookeeper_tag" "$ctx"
}

size() { podman image inspect --format '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1e6 }'; }

build_blockmgr
echo "image: $tag ($(size "$tag"))"
if [ $zookeeper = 1 ]; then
  build_zookeeper
  echo "image: $zookeeper_tag ($(size "$zookeeper_tag"))"
fi
