#!/usr/bin/env bash
# Installs what only the tests use, when missing: headless Chromium (renders the status pages)
# and the Prometheus server (scrapes /metrics). Tests that need them skip, saying so, where
# they cannot be installed; a failed install here is therefore reported but not fatal.
set -uo pipefail

# fonts-dejavu-core: the storage page screenshot needs a font to draw its text with.
packages=(chromium fonts-dejavu-core prometheus)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-test-deps: all packages present"
  exit 0
fi

echo "install-test-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
# The Prometheus package would start a server on :9090 where an init system runs; the tests
# start their own on a free loopback port.
if ! { $SUDO apt-get update -qq &&
       $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; }; then
  echo "install-test-deps: could not install ${missing[*]}; the tests that need them will skip" >&2
fi
exit 0
