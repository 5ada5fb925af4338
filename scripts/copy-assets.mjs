// After `tsc -b tsconfig.build.json`: copies each package's run-time files that tsc does not emit
// (worker and child-process entries in plain JavaScript, Jinja templates) from src/ to the same
// place under dist/, where the compiled modules look for them beside themselves.
import { cpSync, readdirSync } from "node:fs"
import { join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import { ASSET, packageDirs } from "./workspace.mjs"

const root = fileURLToPath(new URL("..", import.meta.url))
const packages = packageDirs(root)

let copied = 0
for (const pkg of packages) {
  const src = join(root, pkg, "src")
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = join(dir, entry.name)
      if (entry.isDirectory()) walk(file)
      else if (ASSET.test(entry.name)) {
        cpSync(file, join(root, pkg, "dist", relative(src, file)))
        copied++
      }
    }
  }
  walk(src)
}
console.log(`copied ${copied} run-time files into dist/`)
