#!/usr/bin/env node
// The `reins` command: runs the compiled CLI (dist/, built by `npm run build`, which `npm install`
// runs in this repository). Under `--conditions=reins-source` (how this repository's tests run
// reins, e.g. NODE_OPTIONS=--conditions=reins-source) it runs the TypeScript sources through tsx.
const fromSource = import.meta.resolve("reins").endsWith(".ts")
if (fromSource) (await import("tsx/esm/api")).register()
const entry = new URL(fromSource ? "../src/bin.ts" : "../dist/bin.js", import.meta.url)
try {
  await import(entry.href)
} catch (error) {
  if (error?.code === "ERR_MODULE_NOT_FOUND" && String(error.message).includes(entry.pathname)) {
    console.error(`reins: ${entry.pathname} is missing; build reins first (npm run build)`)
    process.exit(1)
  }
  throw error
}
