// What the build scripts share: the packages that compile into dist/, and which of their files
// are run-time files tsc does not emit (worker and child-process entries, Jinja templates).
import { readdirSync } from "node:fs"
import { join } from "node:path"

/** Each package's folder relative to `root`: runtime and every packages/* folder. */
export const packageDirs = (root) => ["runtime", ...readdirSync(join(root, "packages")).map((name) => join("packages", name))]

/** Run-time files copied from src/ to dist/ as they are. */
export const ASSET = /\.(mjs|cjs|jinja)$/
