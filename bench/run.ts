/**
 * `npm run bench -- NAME [args...]`: runs `bench/NAME.ts`, whose default export is
 * `(args: ReadonlyArray<string>) => Promise<void>`. Every benchmark measures its own baseline in
 * the same run and writes its results with `writeReport` (JSON, Markdown table, SVG chart).
 */
import { readdirSync } from "node:fs"
import { fileURLToPath } from "node:url"

const here = fileURLToPath(new URL(".", import.meta.url))
const available = readdirSync(here)
  .filter((f) => f.endsWith(".ts") && !["run.ts", "report.ts"].includes(f) && !f.endsWith(".d.ts"))
  .map((f) => f.slice(0, -3))
  .sort()

const [name, ...args] = process.argv.slice(2)
if (name === undefined || !available.includes(name)) {
  console.error(`usage: npm run bench -- NAME [args...]\navailable benchmarks: ${available.join(", ") || "(none)"}`)
  process.exit(2)
}
const mod = (await import(`./${name}.ts`)) as { default: (args: ReadonlyArray<string>) => Promise<void> }
await mod.default(args)
