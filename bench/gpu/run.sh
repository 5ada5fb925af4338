#!/usr/bin/env bash
# The GPU check on a machine without Node: unpacks the Node binary and Dawn beside themselves (xz,
# or Python's lzma where xz is missing), records the card and driver, and runs the bundled check.
# Results (gpu.json, gpu.md, gpu.svg, gpu-nvidia-smi.txt) go to $OUT, else bench/results/.
# Arguments are passed to the check (default backend: REINS_BACKEND, else webgpu).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/../../results}
mkdir -p "$out"
# Every .xz file of the pack (the Node binary, Dawn) is unpacked beside itself, once.
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
{ nvidia-smi || echo "nvidia-smi: not available"; } >"$out/gpu-nvidia-smi.txt" 2>&1
backend=${REINS_BACKEND:-webgpu}
unset REINS_BACKEND
exec "$node" "$here/check.mjs" --backend "$backend" --out "$out" "$@"
