#!/usr/bin/env bash
# `make run`: mount ctxfs, define a demo agent on debug/echo, send it one
# message, show the session's files, and keep serving until Ctrl+C.
set -euo pipefail
ROOT=${1:-/ctx}
STORE=${2:-/var/lib/ctxfs}
BIN=$(cd "$(dirname "$0")/.." && pwd)/bin
if [ "$(id -u)" != 0 ]; then
	echo "make run mounts directly as root: run it as root (sudo make run)" >&2
	exit 1
fi
"$BIN/ctxfs" umount --root "$ROOT" >/dev/null 2>&1 || true

# The server first: it refuses a root or a store that someone else owns or
# may write (naming the fix) before anything is made there, so the demo
# agent below is written only into a root it accepted. It stays in the
# foreground, logging to our stdout: a Ctrl+C reaches it with the rest of
# the process group, and it stops cleanly even when that output is a pipe
# whose reader the Ctrl+C killed first (`make run 2>&1 | tee log`).
#
# It says "ready" on fd 3 (CTXFS_READY_FD, as it tells a background
# `ctxfs mount`) once both mounts and all sockets answer; the fifo's end of
# file without it means it refused to start, having said why. Sockets on
# disk prove nothing: a killed server's are left behind.
ready=$(mktemp -u /tmp/ctxfs-demo-ready.XXXXXX)
mkfifo -m 600 "$ready"
CTXFS_READY_FD=3 "$BIN/ctxfs" mount --foreground --root "$ROOT" --store "$STORE" 3>"$ready" &
server=$!
stop() {
	kill -TERM "$server" 2>/dev/null || true
	wait "$server" 2>/dev/null || true
	rm -f "$ready"
}
trap stop EXIT
trap 'exit 0' INT TERM
read -r said <"$ready" || true
rm -f "$ready"
[ "$said" = ready ] || exit 1
mkdir -p "$ROOT/agent/demo.d"
echo debug/echo >"$ROOT/agent/demo.d/model"
for _ in $(seq 100); do # the server makes a new definition's socket within a second
	[ -S "$ROOT/agent/demo.sock" ] && break
	sleep 0.05
done

export CTX_ROOT=$ROOT
echo "\$ ctx agent send demo 'hello from ctxfs'"
"$BIN/ctx" agent send demo "hello from ctxfs"
dir=$ROOT/home/$(id -u)/agent/demo/session/$(cat "$ROOT/home/$(id -u)/agent/demo/session/index/current")
echo
echo "\$ ls -l $dir"
ls -l "$dir"
for f in state cwd meta.json latest.md messages.jsonl events.jsonl; do
	echo
	echo "\$ cat $dir/$f"
	cat "$dir/$f"
done
cat <<EOT

ctxfs serves $ROOT (store $STORE). In another shell try:
  CTX_ROOT=$ROOT $BIN/ctx agent send demo "another message"
  CTX_ROOT=$ROOT $BIN/ctx agent chat demo
  tail -f $dir/events.jsonl
More agents (a shell in a chroot, any command, real models): examples/README.md
Ctrl+C stops the server and unmounts.
EOT
wait "$server"
