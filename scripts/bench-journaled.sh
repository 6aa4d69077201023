#!/bin/sh
# bench-journaled.sh [BENCH] [BENCHTIME] — run integration benchmarks with
# the store (and every native reference) on an ext4 that has a journal, made
# for the purpose on the disk that holds ${TMPDIR:-/tmp}: a sparse image,
# mkfs.ext4's defaults, mounted through a loop device with direct I/O (so
# the image's writes are not cached twice and its flushes reach the disk).
#
# Why: a durable append's cost depends on the filesystem. Without a journal
# (the root of the machine these benchmarks were first run on), a reference
# append+fdatasync writes the data and the inode, about what ctxfs's
# journal pays for an overwrite; with one, the reference also commits the
# filesystem's journal, and the same ratios come out two to three times
# higher. The benchmarks report store-journal (1 or 0) so that a figure
# says which it was. As root: it makes a loop device and mounts.
set -eu
cd "$(dirname "$0")/.."
# The default names BenchmarkDurableSends, BenchmarkAppend's fd and
# open-close rows and BenchmarkFirstDelta (its aim is one fdatasync of the
# store's filesystem), anchored: BenchmarkClusterDurableSends is another
# benchmark (MooseFS), and its socket paths do not fit under this image.
bench=${1:-'^Benchmark(DurableSends|Append|FirstDelta)$/^(clients=|fd$|open-close$|short$|long$)'}
bt=${2:-2s}
base=$(mktemp -d "${TMPDIR:-/tmp}/ctxfs-bench-ext4.XXXXXX")
img=$base/ext4.img
mnt=$base/mnt
dev=
cleanup() {
	if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || umount -l "$mnt"; fi
	if [ -n "$dev" ]; then losetup -d "$dev" 2>/dev/null || true; fi
	rm -rf "$base"
}
# Interrupted, stop there: a shell goes on after its INT trap, and would
# attach and mount an image the cleanup just removed.
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$mnt"
truncate -s 4G "$img"
mkfs.ext4 -q -F "$img"
dev=$(losetup --find --show --direct-io=on "$img")
mount "$dev" "$mnt"
mkdir "$mnt/tmp"
echo "store: ext4 with a journal on $dev (image $img, direct I/O), kernel $(uname -r)"
TMPDIR=$mnt/tmp go test -run='^$' -bench="$bench" -benchtime="$bt" -timeout 30m ./integration/
