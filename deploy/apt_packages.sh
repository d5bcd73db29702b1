# Sourced by the install scripts: installs the named Debian packages that are missing.
#   install_missing_packages TAG PACKAGE...
# Prints "TAG: all packages present" or "TAG: installing ..."; returns apt-get's status.

install_missing_packages() {
  local tag="$1"
  shift
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "$tag: all packages present"
    return 0
  fi
  echo "$tag: installing ${missing[*]}"
  local sudo=
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${missing[@]}"
}
