#!/usr/bin/env bash
# The GPU check, or the headline, on a machine without Node: unpacks the Node binary, Dawn, the
# SQLite addon and a Vulkan loader beside themselves (xz, or Python's lzma where xz is missing),
# records the card and driver, and runs the bundled program. Results go to $OUT, else bench/results/.
#   run.sh [options]            the check: gpu.json, gpu.md, gpu.svg (bench/gpu.ts options;
#                               default backend: REINS_BACKEND, else webgpu)
#   run.sh headline [options]   sync-vs-async with the device on REINS_BACKEND (else webgpu) and the
#                               harnesses on the CPU cores: sync-vs-async.* (bench/sync-vs-async.ts options)
#   run.sh rollback [options]   a Train's rollback point kept on the device vs copied out, on
#                               REINS_BACKEND (else webgpu): rollback-<backend>.* (bench/rollback.ts options)
# All write gpu-nvidia-smi.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/../../results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Every .xz file of the pack (the Node binary, Dawn, the SQLite addon, the loader) is unpacked beside itself, once.
unxz() {
  if command -v xz >/dev/null; then
    xz -dc "$1" >"$2.tmp"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2.tmp"
  fi || { echo "run.sh: cannot unpack $1 (it needs xz or python3)" >&2; exit 1; }
  mv "$2.tmp" "$2"
}
[ -f "$here/node.xz" ] || [ -x "$here/node" ] || { echo "run.sh: $here/node.xz is missing: pack without --no-node" >&2; exit 1; }
while IFS= read -r -d '' f; do
  [ -e "${f%.xz}" ] || unxz "$f" "${f%.xz}"
done < <(find "$here" -name '*.xz' -print0)
node=$here/node
[ -x "$node" ] || chmod +x "$node"
# Dawn needs a Vulkan loader: the machine's, else the one in the pack (from the machine that packed it).
has_loader() {
  local dirs=${LD_LIBRARY_PATH:-}
  for d in ${dirs//:/ } /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib64; do
    [ -e "$d/libvulkan.so.1" ] && return 0
  done
  return 1
}
if ! has_loader && [ -e "$here/lib/libvulkan.so.1" ]; then
  echo "run.sh: no Vulkan loader on this machine: using the pack's ($here/lib/libvulkan.so.1)" >&2
  export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
{ nvidia-smi || echo "nvidia-smi: not available"; } >"$out/gpu-nvidia-smi.txt" 2>&1
backend=${REINS_BACKEND:-webgpu}
if [ "${1:-}" = headline ]; then
  shift
  # The workload is the repository's (examples/): the nearest folder above the pack that holds it.
  repo=$here
  until [ -d "$repo/examples" ] && [ -d "$repo/bench/syncVsAsync" ]; do
    [ "$repo" != / ] || { echo "run.sh headline: no repository (examples/, bench/syncVsAsync/) above $here" >&2; exit 1; }
    repo=$(dirname "$repo")
  done
  # Its harness processes import `openai`: from the pack's node_modules where the repository has none.
  [ -e "$repo/node_modules" ] || ln -s "$here/node_modules" "$repo/node_modules"
  cd "$repo"
  REINS_BACKEND=$backend exec "$node" "$here/app/dist/headline.mjs" --out "$out" "$@"
fi
if [ "${1:-}" = rollback ]; then
  shift
  REINS_BACKEND=$backend exec "$node" "$here/app/dist/rollback.mjs" --out "$out" "$@"
fi
unset REINS_BACKEND
exec "$node" "$here/app/dist/check.mjs" --backend "$backend" --out "$out" "$@"
