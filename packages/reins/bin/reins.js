#!/usr/bin/env node
// The `reins` command: runs the compiled CLI (dist/, built by `npm run build`, which `npm install`
// runs in this repository). Under `--conditions=reins-source` (how this repository's tests run
// reins, e.g. NODE_OPTIONS=--conditions=reins-source) it runs the TypeScript sources through tsx.
//
// Help and version (`reins`, `reins --help`, `reins <command> --help`, `reins --version`) come
// from dist/cli-bundle/, the same command line bundled with effect into a few files, which starts
// in under half the time (scripts/bundle-cli.mjs says why and how).
import { setFlagsFromString } from "node:v8"

// V8 allocates objects straight into its old generation when their allocation site's objects
// often survived a young-generation GC ("pretenuring"). On the Gateway's path that backfires:
// parts of each call (Effect fibers, Node's request and response) end up in the old generation,
// and once dead they still point at the next calls' young objects, which each scavenge must then
// copy until the next full GC: ~1.1 MB per scavenge and ~4 ms pauses instead of ~0.5 MB and
// ~1.5 ms, and those pauses are the calls at p99 (gateway/README.md, "Tail latency"). Set here,
// before anything is allocated; node refuses this flag in NODE_OPTIONS.
setFlagsFromString("--no-allocation-site-pretenuring")

const fromSource = import.meta.resolve("reins").endsWith(".ts")
if (fromSource) (await import("tsx/esm/api")).register()
const args = process.argv.slice(2)
const helpOnly = args.length === 0 || args.some((a) => a === "--help" || a === "-h" || a === "--version")
const compiled = helpOnly ? "../dist/cli-bundle/bin.mjs" : "../dist/bin.js"
const entry = new URL(fromSource ? "../src/bin.ts" : compiled, import.meta.url)
try {
  await import(entry.href)
} catch (error) {
  if (error?.code === "ERR_MODULE_NOT_FOUND" && String(error.message).includes(entry.pathname)) {
    console.error(`reins: ${entry.pathname} is missing; build reins first (npm run build)`)
    process.exit(1)
  }
  throw error
}
