/**
 * Before any test: brings the compiled packages (dist/) up to date with the sources, because the
 * tests import them and the `reins` processes they start run them, as installed (see
 * vitest.config.ts and reinsEnv in reinsCli.ts).
 * `tsc -b` is incremental: a second or two when nothing changed, as after `npm install`.
 */
import { execFileSync } from "node:child_process"
import { fileURLToPath } from "node:url"

export default function setup() {
  const root = fileURLToPath(new URL("..", import.meta.url))
  try {
    execFileSync("npm", ["run", "--silent", "build"], { cwd: root, stdio: ["ignore", "inherit", "inherit"], timeout: 300_000 })
  } catch (e) {
    throw new Error(`the tests need reins compiled, and \`npm run build\` failed: ${(e as Error).message}`)
  }
}
