#!/usr/bin/env node
/**
 * `node bench/gpu/pack.mjs [--out DIR] [--no-node]`: everything the GPU check needs on a machine
 * with a GPU and no Node, no npm and no network, in one folder (default bench/gpu/pack/, ignored
 * by git) small enough to copy (< 64 MiB):
 *
 *   check.mjs       the check (bench/gpu.ts) and every module it imports, bundled by esbuild from
 *                   the TypeScript sources (reins, effect, TensorFlow.js and its backends)
 *   node.xz         this machine's Node binary, xz-compressed (--no-node leaves it out)
 *   node_modules/   what cannot be bundled: the wasm backend's .wasm files, and the `webgpu`
 *                   package with only its Linux x64 Dawn binary (dawn.node.xz)
 *   *.jinja         files the bundled modules read beside themselves
 *   run.sh          unpacks node and runs the check (bench/gpu/README.md)
 */
import { build } from "esbuild"
import { execFileSync } from "node:child_process"
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../..", import.meta.url))
const args = process.argv.slice(2)
const outAt = args.indexOf("--out")
const out = path.resolve(outAt >= 0 ? args[outAt + 1] : path.join(root, "bench/gpu/pack"))
const withNode = !args.includes("--no-node")
const require = createRequire(path.join(root, "packages/policy/package.json"))
const packageDir = (name) => path.dirname(require.resolve(`${name}/package.json`))

/**
 * An xz-compressed copy of `from` (run.sh unpacks every .xz file of the pack). Level 1: Dawn's
 * 21 MB take 2.5 s of CPU to 5.7 MB, where the default level 6 takes 17 s to 4.9 MB.
 */
const xz = (from, to) => writeFileSync(to, execFileSync("xz", ["-T0", "-1", "-c", from], { maxBuffer: 256 * 2 ** 20 }))

rmSync(out, { recursive: true, force: true })
mkdirSync(out, { recursive: true })

await build({
  entryPoints: [path.join(root, "bench/gpu/main.ts")],
  outfile: path.join(out, "check.mjs"),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  // reins from its TypeScript sources, as the tests and benches run it
  conditions: ["reins-source"],
  // loaded at run time from node_modules/ beside the bundle (native code), or optional and absent
  external: ["webgpu", "@tensorflow/tfjs-node", "@tensorflow/tfjs-node-gpu", "msgpackr-extract"],
  // CommonJS modules inside an ES module bundle still call require() and read __dirname
  banner: {
    js: [
      "import { createRequire as __reinsRequire } from 'node:module'",
      "import { fileURLToPath as __reinsPath } from 'node:url'",
      "const require = __reinsRequire(import.meta.url)",
      "const __filename = __reinsPath(import.meta.url)",
      "const __dirname = __reinsPath(new URL('.', import.meta.url))"
    ].join(";")
  },
  minify: true,
  legalComments: "external",
  logLevel: "warning"
})

// Read beside the module that loads them (new URL("./…", import.meta.url)).
copyFileSync(path.join(root, "packages/policy/src/chat/chat_template.jinja"), path.join(out, "chat_template.jinja"))

// The wasm backend finds its binaries through its package.json (backend.ts).
const wasm = packageDir("@tensorflow/tfjs-backend-wasm")
const wasmOut = path.join(out, "node_modules/@tensorflow/tfjs-backend-wasm")
mkdirSync(path.join(wasmOut, "dist"), { recursive: true })
copyFileSync(path.join(wasm, "package.json"), path.join(wasmOut, "package.json"))
for (const f of readdirSync(path.join(wasm, "dist")).filter((f) => f.endsWith(".wasm"))) copyFileSync(path.join(wasm, "dist", f), path.join(wasmOut, "dist", f))

// Dawn: the package's loader and its Linux x64 binary only (it ships every platform's).
const webgpu = packageDir("webgpu")
const webgpuOut = path.join(out, "node_modules/webgpu")
mkdirSync(path.join(webgpuOut, "dist/linux-x64"), { recursive: true })
for (const f of ["package.json", "index.js", "LICENSE.md"]) copyFileSync(path.join(webgpu, f), path.join(webgpuOut, f))
// 21 MB as it is, ~6 MB compressed: run.sh unpacks it
xz(path.join(webgpu, "dist/linux-x64/dawn.node"), path.join(webgpuOut, "dist/linux-x64/dawn.node.xz"))

cpSync(path.join(root, "bench/gpu/run.sh"), path.join(out, "run.sh"))
chmodSync(path.join(out, "run.sh"), 0o755)
if (withNode) {
  console.log(`compressing ${process.execPath} (${process.version})...`)
  xz(process.execPath, path.join(out, "node.xz"))
  writeFileSync(path.join(out, "node.version"), `${process.version}\n`)
}

const size = (p) => (statSync(p).isDirectory() ? readdirSync(p).reduce((n, f) => n + size(path.join(p, f)), 0) : statSync(p).size)
const mib = size(out) / 2 ** 20
console.log(`packed ${out}: ${mib.toFixed(1)} MiB${withNode ? "" : " (without node)"}`)
if (mib >= 64) {
  console.error(`the pack is ${mib.toFixed(1)} MiB: over the 64 MiB a copy to the GPU machine allows`)
  process.exit(1)
}
if (!existsSync(path.join(out, "check.mjs"))) process.exit(1)
