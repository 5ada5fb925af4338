/**
 * The rollback bench on a GPU machine (the third entry of the bundle bench/gpu/pack.mjs makes):
 * `node rollback.mjs [rollback options]`, run by `run.sh rollback`. The same benchmark as
 * `npm run bench -- rollback`, on REINS_BACKEND: a Train's rollback point kept on the device against
 * copied out across the card's bus. A failure prints its message, not the bundle's minified source.
 */
import rollback from "../rollback.js"

try {
  await rollback(process.argv.slice(2))
} catch (e) {
  console.error(`rollback: ${(e instanceof Error ? e.message : String(e)).split("\n")[0]}`)
  process.exit(1)
}
