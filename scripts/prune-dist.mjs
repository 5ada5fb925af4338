// After `tsc -b tsconfig.build.json` and copy-assets.mjs: deletes every file under a package's
// dist/ whose source under src/ is gone (a module renamed or removed since the last build). tsc
// never deletes outputs, so without this a stale module would still load in this checkout (and
// ship in an `npm pack` made from it) while a fresh clone fails on it.
import { existsSync, readdirSync, rmdirSync, rmSync } from "node:fs"
import { join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import { ASSET, packageDirs } from "./workspace.mjs"

// The repository root; a test passes another one.
const root = process.argv[2] ?? fileURLToPath(new URL("..", import.meta.url))
const packages = packageDirs(root)
/** Folders of dist/ that a later build step writes whole (bundle-cli.mjs), not tsc: left alone. */
const BUILT_AFTER = new Set(["cli-bundle"])
/** tsc's outputs of one `X.ts`: the module, its declarations and their maps. */
const COMPILED = /\.(js|js\.map|d\.ts|d\.ts\.map)$/

let pruned = 0
for (const pkg of packages) {
  const src = join(root, pkg, "src")
  const dist = join(root, pkg, "dist")
  if (!existsSync(dist)) continue
  const hasSource = (file) => {
    const rel = relative(dist, file)
    if (ASSET.test(rel)) return existsSync(join(src, rel))
    if (!COMPILED.test(rel)) return true // .tsbuildinfo and anything else tsc keeps for itself
    const base = rel.replace(COMPILED, "")
    return existsSync(join(src, `${base}.ts`)) || existsSync(join(src, `${base}.tsx`))
  }
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = join(dir, entry.name)
      if (entry.isDirectory()) {
        if (dir === dist && BUILT_AFTER.has(entry.name)) continue
        walk(file)
        if (readdirSync(file).length === 0) rmdirSync(file)
      } else if (!hasSource(file)) {
        rmSync(file)
        pruned++
      }
    }
  }
  walk(dist)
}
if (pruned > 0) console.log(`removed ${pruned} stale files from dist/ (their sources are gone)`)
