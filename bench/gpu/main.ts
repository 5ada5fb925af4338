/**
 * The GPU check as a program (the entry of the bundle bench/gpu/pack.mjs makes):
 * `node check.mjs [options]`. A failure prints its message, not the bundle's minified source.
 */
import check from "../gpu.js"

try {
  await check(process.argv.slice(2))
} catch (e) {
  console.error(`gpu check: ${e instanceof Error ? e.message : String(e)}`)
  process.exit(1)
}
