/**
 * The headline on a GPU machine (the second entry of the bundle bench/gpu/pack.mjs makes):
 * `node headline.mjs [sync-vs-async options]`, run by `run.sh headline`. The same benchmark as
 * `npm run bench -- sync-vs-async`: the device worker on the GPU backend (REINS_BACKEND), the
 * harness and verifier processes on the machine's CPU cores, the repository's examples/ as the
 * workload. A failure prints its message, not the bundle's minified source.
 */
import syncVsAsync from "../sync-vs-async.js"

try {
  await syncVsAsync(process.argv.slice(2))
} catch (e) {
  // its first line: the reason (a device that cannot start names what is missing), not the bundle's stack
  console.error(`sync-vs-async: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]}`)
  process.exit(1)
}
