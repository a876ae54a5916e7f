#!/bin/sh
# skyd, one-file build: this POSIX shell launcher followed by a gzip'd tar of the one-folder
# build (packaging/onefile.py writes it). The first run unpacks the payload once into a
# per-user cache keyed by its sha256; every run then execs the cached binary (~1 ms more).
#   SKYD_ONEFILE_CACHE   cache folder (default: ${XDG_CACHE_HOME:-~/.cache}/skyd/onefile)
# Everything after the `exit` below is binary payload, never read by the shell.
H=@HASH@
O=@OFFSET@
C=${SKYD_ONEFILE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/skyd/onefile}
D=$C/$H
case $0 in /*) SKYD_ONEFILE=$0 ;; *) SKYD_ONEFILE=$PWD/${0#./} ;; esac
export SKYD_ONEFILE
complete() {  # unpacked in full, by this user (a folder of someone else's is never run)
  [ -f "$1/.complete" ] && read -r M < "$1/.complete" && [ "$M" = "$H" ] &&
    [ -O "$1" ] && [ -x "$1/skyd/skyd" ] && [ -O "$1/skyd/skyd" ]
}
[ -O "$C" ] && complete "$D" && exec "$D/skyd/skyd" "$@"

die() { echo "skyd: $*" >&2; exit 1; }
sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 | cut -d' ' -f1
  elif command -v openssl >/dev/null 2>&1; then openssl dgst -sha256 -r | cut -d' ' -f1
  else echo "(no sha256sum, shasum or openssl to check it)"
  fi
}
in_use() {  # is a process of ours running a binary from folder $1? (Linux /proc)
  [ -d /proc/self ] || return 0  # cannot tell: keep it
  ls -l /proc/[0-9]*/exe 2>/dev/null | grep -qF -- " -> $1/"
}

(umask 077 && mkdir -p "$C") 2>/dev/null && [ -w "$C" ] ||
  die "cannot write the unpack cache $C (set SKYD_ONEFILE_CACHE to a writable folder)"
[ -O "$C" ] || die "the unpack cache $C belongs to another user (set SKYD_ONEFILE_CACHE)"
LOCKED=
if command -v flock >/dev/null 2>&1; then  # one unpacker at a time; the others wait here
  exec 9>"$C/.lock" && flock 9 && LOCKED=1
fi
if ! complete "$D"; then
  [ -n "$LOCKED" ] && rm -rf "$C"/.tmp.*  # left by an unpack that was killed
  T=$(mktemp -d "$C/.tmp.XXXXXX") || die "cannot create a folder in $C"
  trap 'rm -rf "$T"' EXIT
  trap 'exit 1' HUP INT TERM
  S=$(tail -c +$((O + 1)) "$0" | sha256)
  [ "$S" = "$H" ] || die "$0 is damaged (payload sha256 $S, expected $H): download it again"
  tail -c +$((O + 1)) "$0" | (cd "$T" && tar -xzf -) || die "cannot unpack $0 into $T"
  [ -x "$T/skyd/skyd" ] || die "$0 holds no skyd/skyd"
  printf '%s\n' "$H" > "$T/.complete" || die "cannot write $T/.complete"
  if [ -d "$D" ] && ! complete "$D"; then rm -rf "$D"; fi  # incomplete (or not ours)
  if complete "$D"; then rm -rf "$T"  # another unpacker (without flock) was first
  elif ! mv "$T" "$D"; then die "cannot move $T to $D"
  fi
  trap - EXIT HUP INT TERM
  if [ -n "$LOCKED" ]; then  # other versions no process of ours runs from any more
    for V in "$C"/*; do
      [ "$V" != "$D" ] && [ -f "$V/.complete" ] && ! in_use "$V" && rm -rf "$V"
    done
  fi
fi
[ -n "$LOCKED" ] && exec 9>&-
exec "$D/skyd/skyd" "$@"
exit 1
