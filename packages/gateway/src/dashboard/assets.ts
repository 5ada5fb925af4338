/**
 * The dashboard's static files, all shipped with the package: its own modules and stylesheet
 * (`packages/gateway/ui/`) and the libraries it is built from, read from their npm packages
 * (Preact, its hooks, htm, uPlot). Nothing is fetched at run time; the browser gets them from
 * `/ui/assets/NAME` and `/ui/vendor/NAME`, resolved by the page's import map.
 */
import { readdirSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import path from "node:path"
import { fileURLToPath } from "node:url"

export interface Asset {
  readonly body: Uint8Array
  readonly contentType: string
}

const TYPES: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml"
}

const load = (file: string): Asset => ({ body: readFileSync(file), contentType: TYPES[path.extname(file)] ?? "application/octet-stream" })

/** The same from `src/dashboard/` and `dist/dashboard/`: the package root is two levels up. */
const UI_DIR = fileURLToPath(new URL("../../ui/", import.meta.url))

/**
 * Served name → [an entry its npm package exports, the file beside that entry to serve]. htm and
 * uPlot export only their entry points, so their ES module builds are found next to them.
 */
const VENDOR: Record<string, readonly [string, string | null]> = {
  "preact.mjs": ["preact", null],
  "hooks.mjs": ["preact/hooks", null],
  "htm.mjs": ["htm", "htm.module.js"],
  "uplot.mjs": ["uplot", "uPlot.esm.js"],
  "uplot.css": ["uplot", "uPlot.min.css"]
}

/** The bare specifiers the modules import, for the page's import map. */
export const IMPORT_MAP = {
  imports: {
    preact: "/ui/vendor/preact.mjs",
    "preact/hooks": "/ui/vendor/hooks.mjs",
    htm: "/ui/vendor/htm.mjs",
    uplot: "/ui/vendor/uplot.mjs"
  }
}

export interface Assets {
  readonly own: ReadonlyMap<string, Asset>
  readonly vendor: ReadonlyMap<string, Asset>
}

/** Reads every file once, at Gateway start: a missing one is a start-up error, not a blank page later. */
export const loadAssets = (): Assets => {
  const require = createRequire(import.meta.url)
  const own = new Map<string, Asset>()
  const walk = (dir: string, prefix: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(path.join(dir, entry.name), `${prefix}${entry.name}/`)
      else if (path.extname(entry.name) in TYPES) own.set(prefix + entry.name, load(path.join(dir, entry.name)))
    }
  }
  walk(UI_DIR, "")
  const vendor = new Map(
    Object.entries(VENDOR).map(([name, [spec, beside]]) => {
      const entry = require.resolve(spec)
      return [name, load(beside === null ? entry : path.join(path.dirname(entry), beside))] as const
    })
  )
  return { own, vendor }
}
