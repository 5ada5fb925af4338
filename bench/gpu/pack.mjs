#!/usr/bin/env node
/**
 * `node bench/gpu/pack.mjs [--out DIR] [--no-node]`: everything the GPU check and the headline
 * need on a machine with a GPU and no Node, no npm and no network, in one folder (default
 * bench/gpu/pack/, ignored by git) small enough to copy (< 64 MiB):
 *
 *   app/dist/       the bundles, made by esbuild from the TypeScript sources:
 *     check.mjs       the check (bench/gpu.ts)
 *     headline.mjs    the headline (bench/sync-vs-async.ts: Gateway, Controller, Trainer, devices)
 *     rollback.mjs    a Train's rollback point kept on the device vs copied out (bench/rollback.ts)
 *     device-worker.mjs, worker.js
 *                     the device's worker thread (Device.ts starts `./worker.js` beside itself)
 *     chunk-*.mjs     the modules those entries share (reins, effect, TensorFlow.js, ...)
 *     *.mjs, *.jinja  files the bundled modules load beside themselves (threads, templates)
 *   ui/             the Gateway's dashboard files (it reads them at start)
 *   node.xz         this machine's Node binary, xz-compressed (--no-node leaves it out)
 *   node_modules/   what cannot be bundled: the wasm backend's .wasm files, the `webgpu` package
 *                   with only its Linux x64 Dawn binary (dawn.node.xz), better-sqlite3 with its
 *                   addon (the Gateway's store), the dashboard's libraries (preact, htm,
 *                   uplot), and `openai` bundled for the calc harness
 *   lib/            this machine's Vulkan loader (libvulkan.so.1.xz), for a GPU machine without one
 *   run.sh          unpacks node and runs the check, or (`run.sh headline`) the headline, or
 *                   (`run.sh rollback`) the rollback bench
 *
 * The headline runs its workload from the repository's examples/, which the GPU machine has (the
 * working tree is copied there); run.sh links the pack's node_modules/ into it for the harness.
 */
import { build } from "esbuild"
import { execFileSync } from "node:child_process"
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../..", import.meta.url))
const args = process.argv.slice(2)
const outAt = args.indexOf("--out")
const out = path.resolve(outAt >= 0 ? args[outAt + 1] : path.join(root, "bench/gpu/pack"))
const withNode = !args.includes("--no-node")
const require = createRequire(path.join(root, "packages/policy/package.json"))
/** The folder of package `name` as `req` finds it (from its entry: not every package exports its package.json). */
const packageDirOf = (req, name) => {
  for (let dir = path.dirname(req.resolve(name)); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const manifest = path.join(dir, "package.json")
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, "utf8")).name === name) return dir
  }
  throw new Error(`pack: no package.json of ${name} above ${req.resolve(name)}`)
}
const packageDir = (name) => packageDirOf(require, name)

/**
 * An xz-compressed copy of `from` (run.sh unpacks every .xz file of the pack). Level 1: Dawn's
 * 21 MB take 2.5 s of CPU to 5.7 MB, where the default level 6 takes 17 s to 4.9 MB.
 */
const xz = (from, to) => writeFileSync(to, execFileSync("xz", ["-T0", "-1", "-c", from], { maxBuffer: 256 * 2 ** 20 }))

rmSync(out, { recursive: true, force: true })
mkdirSync(out, { recursive: true })

// The modules the bundles load with a bare import at run time (native code, or optional and absent).
// The Kubernetes client is only loaded by the k8s launcher, which neither entry uses (3 MB).
const EXTERNAL = ["@kubernetes/client-node", "webgpu", "@tensorflow/tfjs-node", "@tensorflow/tfjs-node-gpu", "msgpackr-extract", "better-sqlite3", "bufferutil", "utf-8-validate"]

// CommonJS modules inside an ES module bundle still call require() and read __dirname
const BANNER = [
  "import { createRequire as __reinsRequire } from 'node:module'",
  "import { fileURLToPath as __reinsPath } from 'node:url'",
  "const require = __reinsRequire(import.meta.url)",
  "const __filename = __reinsPath(import.meta.url)",
  "const __dirname = __reinsPath(new URL('.', import.meta.url))"
].join(";")

// Four entries sharing their modules as chunks, all in one folder: a module's
// `new URL("./x", import.meta.url)` then finds x beside whichever chunk holds it. Two levels down
// (app/dist/), as dist/dashboard/ is in the gateway package, so the dashboard's `../../ui/` is ui/.
const js = path.join(out, "app/dist")
await build({
  entryPoints: {
    check: path.join(root, "bench/gpu/main.ts"),
    headline: path.join(root, "bench/gpu/headline.ts"),
    rollback: path.join(root, "bench/gpu/rollback.ts"),
    "device-worker": path.join(root, "packages/policy/src/device/worker.ts")
  },
  outdir: js,
  outExtension: { ".js": ".mjs" },
  splitting: true,
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  // reins from its TypeScript sources, as the tests and benches run it
  conditions: ["reins-source"],
  external: EXTERNAL,
  banner: { js: BANNER },
  minify: true,
  legalComments: "external",
  logLevel: "warning"
})
// Device.ts starts `worker.js` beside itself (the compiled layout); here that is the bundled entry.
writeFileSync(path.join(js, "worker.js"), 'import "./device-worker.mjs"\n')
writeFileSync(path.join(out, "package.json"), `${JSON.stringify({ private: true, type: "module" }, null, 2)}\n`)

// Worker threads and a child process helper, started from files beside the module that starts them.
for (const f of ["packages/policy/src/checkpoint/checksumWorker.mjs", "packages/gateway/src/store/sqlite/checkpointer.mjs", "packages/rollout/src/process/spawner-child.mjs"]) {
  copyFileSync(path.join(root, f), path.join(js, path.basename(f)))
}

// Read beside the module that loads them (new URL("./…", import.meta.url)).
copyFileSync(path.join(root, "packages/policy/src/chat/chat_template.jinja"), path.join(js, "chat_template.jinja"))
copyFileSync(path.join(root, "packages/trainer/src/sft/compact_chat_template.jinja"), path.join(js, "compact_chat_template.jinja"))

// The Gateway reads its dashboard when it starts (a missing file fails the start): its own files,
// and the libraries it serves from their npm packages.
cpSync(path.join(root, "packages/gateway/ui"), path.join(out, "ui"), { recursive: true })
const gatewayRequire = createRequire(path.join(root, "packages/gateway/package.json"))
for (const name of ["preact", "htm", "uplot"]) cpSync(packageDirOf(gatewayRequire, name), path.join(out, "node_modules", name), { recursive: true })

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

// The Gateway's SQLite store: better-sqlite3's JavaScript, its addon (built for this Node) and
// what finds the addon (`bindings`, which needs `file-uri-to-path`).
const sqlite = packageDir("better-sqlite3")
const sqliteOut = path.join(out, "node_modules/better-sqlite3")
mkdirSync(path.join(sqliteOut, "build/Release"), { recursive: true })
copyFileSync(path.join(sqlite, "package.json"), path.join(sqliteOut, "package.json"))
cpSync(path.join(sqlite, "lib"), path.join(sqliteOut, "lib"), { recursive: true })
xz(path.join(sqlite, "build/Release/better_sqlite3.node"), path.join(sqliteOut, "build/Release/better_sqlite3.node.xz"))
const bindings = packageDirOf(createRequire(path.join(sqlite, "package.json")), "bindings")
const fileUriToPath = packageDirOf(createRequire(path.join(bindings, "package.json")), "file-uri-to-path")
cpSync(bindings, path.join(out, "node_modules/bindings"), { recursive: true })
cpSync(fileUriToPath, path.join(out, "node_modules/file-uri-to-path"), { recursive: true })

// The calc harness imports `openai` (the official SDK): one ES module bundle of it.
await build({
  stdin: { contents: 'export * from "openai"; export { default } from "openai"', resolveDir: root, loader: "js" },
  outfile: path.join(out, "node_modules/openai/index.mjs"),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  minify: true,
  legalComments: "external",
  logLevel: "warning"
})
writeFileSync(path.join(out, "node_modules/openai/package.json"), `${JSON.stringify({ name: "openai", private: true, type: "module", exports: "./index.mjs" }, null, 2)}\n`)

// Dawn's Vulkan loader, for a GPU machine without one (run.sh uses it only then): this machine's.
const LOADER_DIRS = ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
const loader = LOADER_DIRS.map((d) => path.join(d, "libvulkan.so.1")).find(existsSync)
if (loader === undefined) console.log("no libvulkan.so.1 here to pack: the GPU machine must have its own Vulkan loader")
else {
  mkdirSync(path.join(out, "lib"), { recursive: true })
  xz(loader, path.join(out, "lib/libvulkan.so.1.xz"))
}

cpSync(path.join(root, "bench/gpu/run.sh"), path.join(out, "run.sh"))
chmodSync(path.join(out, "run.sh"), 0o755)
if (withNode) {
  console.log(`compressing ${process.execPath} (${process.version})...`)
  xz(process.execPath, path.join(out, "node.xz"))
  writeFileSync(path.join(out, "node.version"), `${process.version}\n`)
}

const size = (p) => (statSync(p).isDirectory() ? readdirSync(p).reduce((n, f) => n + size(path.join(p, f)), 0) : statSync(p).size)
/** The repository's tracked files, which travel to the GPU machine beside the pack (null without git). */
const trackedBytes = () => {
  try {
    const files = execFileSync("git", ["ls-files", "-z"], { cwd: root, maxBuffer: 64 * 2 ** 20 }).toString().split("\0").filter(Boolean)
    return files.reduce((n, f) => n + (existsSync(path.join(root, f)) ? statSync(path.join(root, f)).size : 0), 0)
  } catch {
    return null
  }
}
const mib = size(out) / 2 ** 20
const tracked = trackedBytes()
const repoMib = tracked === null ? 0 : tracked / 2 ** 20
console.log(`packed ${out}: ${mib.toFixed(1)} MiB${withNode ? "" : " (without node)"}${tracked === null ? "" : `; with the repository's tracked files (${repoMib.toFixed(1)} MiB) ${(mib + repoMib).toFixed(1)} MiB`}`)
if (mib + repoMib >= 64) {
  console.error(`the pack (${mib.toFixed(1)} MiB) and the repository's tracked files (${repoMib.toFixed(1)} MiB) are over the 64 MiB a copy to the GPU machine allows`)
  process.exit(1)
}
if (!["check.mjs", "headline.mjs", "rollback.mjs", "device-worker.mjs"].every((f) => existsSync(path.join(js, f)))) process.exit(1)
