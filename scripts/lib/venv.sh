# shellcheck shell=bash
# A test helper's Python tools: pinned PyPI packages in a private venv, installed once.
# Sourced by scripts/webhooks and scripts/mcp, each of which is one call:
#
#   venv_tool NAME DEST PINS [--install | --python]
#
# NAME names the calling script in messages (`==> scripts/NAME: ...`). The venv is
# DEST/venv; DEST/installed records the pins it was built with, so a changed pin rebuilds
# it; DEST.lock keeps parallel callers (tests start helpers in parallel) to one installer.
# `--install` installs and returns; `--python` installs and prints the venv's python;
# anything else installs, prints the usage and exits 2.
#
# Needs python3 (VENV_MIN_PYTHON or newer, when the caller sets it) with its venv module
# and pip: without them it says `SKIP: <why>` and exits 77, which the tests turn into a
# failure naming what to install (baton_testkit::scripts::MISSING_TOOL).

VENV_SKIP=77

venv_tool() {
  local name=$1 dest=$2 pins=$3 action=${4:-}
  _venv_install "$name" "$dest" "$pins"
  case "$action" in
    --install) ;;
    --python) echo "$dest/venv/bin/python" ;;
    *) _venv_log "$name" "usage: scripts/$name --install | --python"; exit 2 ;;
  esac
}

_venv_log() {
  local name=$1
  shift
  printf '==> scripts/%s: %s\n' "$name" "$*" >&2
}

_venv_installed() {
  local dest=$1 pins=$2
  [ -x "$dest/venv/bin/python" ] && [ "$(cat "$dest/installed" 2>/dev/null)" = "$pins" ]
}

_venv_install() {
  local name=$1 dest=$2 pins=$3
  _venv_installed "$dest" "$pins" && return 0
  command -v python3 >/dev/null || { _venv_log "$name" "SKIP: python3 is not installed"; exit "$VENV_SKIP"; }
  python3 -c 'import venv, ensurepip' 2>/dev/null || {
    _venv_log "$name" "SKIP: python3 has no venv/ensurepip module (Debian: apt-get install python3-venv)"
    exit "$VENV_SKIP"
  }
  if [ -n "${VENV_MIN_PYTHON:-}" ] &&
    ! python3 -c 'import sys; sys.exit(sys.version_info < tuple(map(int, sys.argv[1].split("."))))' \
      "$VENV_MIN_PYTHON"; then
    _venv_log "$name" "SKIP: python3 is $(python3 -c 'import platform; print(platform.python_version())'), older than $VENV_MIN_PYTHON"
    exit "$VENV_SKIP"
  fi
  mkdir -p "$(dirname "$dest")"
  # One installer at a time (tests in parallel may all ask).
  exec 9>"$dest.lock"
  command -v flock >/dev/null && flock 9
  _venv_installed "$dest" "$pins" && return 0
  _venv_log "$name" "installing into $dest: $pins"
  rm -rf "$dest" && mkdir -p "$dest"
  python3 -m venv "$dest/venv"
  "$dest/venv/bin/python" -m pip --version >/dev/null 2>&1 ||
    { _venv_log "$name" "SKIP: the venv has no pip"; rm -rf "$dest"; exit "$VENV_SKIP"; }
  # shellcheck disable=SC2086 # one word per pin
  "$dest/venv/bin/pip" install --quiet --disable-pip-version-check $pins
  echo "$pins" >"$dest/installed"
  exec 9>&-
}
