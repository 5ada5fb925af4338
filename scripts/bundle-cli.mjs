// After the compile: bundles reins's command line (packages/reins/dist/bin.js) with effect and
// @effect/cli into packages/reins/dist/cli-bundle/. `reins --help`, `reins <command> --help` and
// `reins --version` run from it: loading effect and @effect/cli as hundreds of separate modules is
// most of the CLI's start-up (0.55 s here, of which a bare `node` is 0.06 s); bundled, help takes
// 0.24 s.
//
// reins's own packages stay external, and the modules the commands load lazily become separate
// chunks that help never loads — so the bundle holds only the command definitions. Commands that
// run go through dist/bin.js as before (bin/reins.js decides), so no process ever mixes the
// bundle's copy of effect with the one reins's packages import.
import { build } from "esbuild"
import { rmSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const reins = fileURLToPath(new URL("../packages/reins", import.meta.url))
const outdir = join(reins, "dist", "cli-bundle")
rmSync(outdir, { recursive: true, force: true })
await build({
  entryPoints: [join(reins, "dist", "bin.js")],
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  external: ["@reins/*"],
  outExtension: { ".js": ".mjs" },
  chunkNames: "chunk-[hash]",
  // Whitespace and syntax only: names stay readable in a stack trace.
  minifyWhitespace: true,
  minifySyntax: true,
  logLevel: "warning"
})
console.log(`bundled the command line into ${join("packages", "reins", "dist", "cli-bundle")}`)
