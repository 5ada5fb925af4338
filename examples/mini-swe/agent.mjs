/**
 * What the mini-swe agent says to the model and what its tools answer, shared by the harness,
 * the demo generator and the verifier so that demonstrations are exactly the conversations the
 * deployed harness produces. Observations are kept short on purpose: every character is context
 * for a tiny policy model.
 */
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"

/** Short: with the template's tool block it is already ~200 tokens of every prompt. */
export const SYSTEM_PROMPT = "Fix the bug."

/** Minimal schemas (no descriptions: the names say enough, and they cost context on every call; run_tests takes no arguments). */
export const TOOLS = [
  { type: "function", function: { name: "read_file", parameters: { type: "object", properties: { path: { type: "string" } } } } },
  { type: "function", function: { name: "run_tests" } },
  {
    type: "function",
    function: {
      name: "replace_in_file",
      parameters: { type: "object", properties: { path: { type: "string" }, old: { type: "string" }, new: { type: "string" } } }
    }
  }
]

/** The harness's last stdout line is `RESULT: {"files": {path: content of every changed file}, ...}`. */
export const RESULT_PREFIX = "RESULT:"

/** Caps on what a tool sends back to the model. */
export const MAX_READ_CHARS = 600
export const MAX_TEST_SUMMARY_CHARS = 160

export const isTestPath = (path) => /\.test\.m?js$/.test(path)

/** Package paths are plain relative names: no absolute paths, no `..`, nothing that could leave the workspace. */
export const isPackagePath = (path) =>
  typeof path === "string" && /^[A-Za-z0-9_][A-Za-z0-9_.-]*(\/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$/.test(path) && !path.split("/").includes("..")

/** The task input's files, checked: `{path: content}` with safe paths and string contents. Throws on anything else. */
export const packageFiles = (input) => {
  const files = input?.files
  if (typeof files !== "object" || files === null || Array.isArray(files)) throw new Error("task input has no `files` object")
  const entries = Object.entries(files)
  if (entries.length === 0) throw new Error("task input has no files")
  for (const [path, content] of entries) {
    if (!isPackagePath(path)) throw new Error(`unsafe file path in task: ${JSON.stringify(path)}`)
    if (typeof content !== "string") throw new Error(`file ${path} is not a string`)
  }
  return Object.fromEntries(entries)
}

/** The opening messages for one task. */
export const firstMessages = (input) => [
  { role: "system", content: SYSTEM_PROMPT },
  { role: "user", content: `${String(input.issue ?? "The tests fail.").trim()}\nFiles: ${Object.keys(input.files).join(", ")}` }
]

/**
 * The assistant message as the harness sends it back on the next call: only the fields the chat
 * template reads, in a fixed shape (demos build the same shape).
 */
export const assistantMessage = (content, toolCalls) =>
  toolCalls !== undefined && toolCalls.length > 0
    ? {
      role: "assistant",
      content: content === "" ? null : content ?? null,
      tool_calls: toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.function.name, arguments: c.function.arguments } }))
    }
    : { role: "assistant", content: content ?? "" }

/** Writes `{path: content}` under `dir`. */
export const writePackage = (dir, files) => {
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true })
    writeFileSync(join(dir, path), content)
  }
}

/**
 * A private copy of the package in a temp dir: the files live in memory (what read_file shows)
 * and on disk (what the tests run against); `changed()` is every file that differs from the task.
 */
export const openWorkspace = (files, prefix = "mini-swe-") => {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  writePackage(dir, files)
  const current = new Map(Object.entries(files))
  return {
    dir,
    paths: () => [...current.keys()],
    read: (path) => current.get(path),
    write: (path, content) => {
      current.set(path, content)
      writeFileSync(join(dir, path), content)
    },
    changed: () => Object.fromEntries([...current].filter(([path, content]) => files[path] !== content)),
    close: () => rmSync(dir, { recursive: true, force: true })
  }
}

const parseArgs = (call) => {
  try {
    const args = JSON.parse(call.function.arguments || "{}")
    return typeof args === "object" && args !== null && !Array.isArray(args) ? args : undefined
  } catch {
    return undefined
  }
}

const truncate = (text, max) => (text.length > max ? `${text.slice(0, max)}...(truncated)` : text)

const unknownPath = (ws, path) => `error: no file ${JSON.stringify(path ?? null)}; files: ${ws.paths().join(", ")}`

/** The tool's text reply to one call; never throws (a bad call gets an `error: ...` text the model can read). */
export const runToolCall = async (ws, call, options = {}) => {
  const name = call?.function?.name
  const args = parseArgs(call)
  if (args === undefined) return "error: arguments must be a JSON object"
  switch (name) {
    case "read_file": {
      const content = ws.read(args.path)
      return content === undefined ? unknownPath(ws, args.path) : truncate(content, MAX_READ_CHARS)
    }
    case "replace_in_file": {
      const content = ws.read(args.path)
      if (content === undefined) return unknownPath(ws, args.path)
      if (typeof args.old !== "string" || args.old === "" || typeof args.new !== "string") {
        return "error: old must be a non-empty string and new a string"
      }
      const count = content.split(args.old).length - 1
      if (count === 0) return `error: old text not found in ${args.path}`
      if (count > 1) return `error: old text occurs ${count} times in ${args.path}; include more of the line`
      ws.write(args.path, content.replace(args.old, () => args.new))
      return "ok"
    }
    case "run_tests":
      return (await runNodeTests(ws.dir, ws.paths().filter(isTestPath), options)).summary
    default:
      return `error: unknown tool ${JSON.stringify(name ?? null)}; tools: read_file, run_tests, replace_in_file`
  }
}

/** The test run's environment: no API keys or reins variables, and nothing that would turn `node --test` into a child reporter or load a loader. */
const testEnv = () => {
  const env = {}
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && !/^(OPENAI_|REINS_|NODE_OPTIONS$|NODE_TEST_CONTEXT$|NODE_V8_COVERAGE$)/.test(k)) env[k] = v
  }
  env.NO_COLOR = "1"
  return env
}

/**
 * Really runs `node --test` on `testFiles` in `dir`. `--test-timeout` makes the runner kill a
 * test file that hangs (an infinite loop the model wrote); a backstop kill covers the runner
 * itself. Resolves `{ passed, failed, summary }`, never rejects.
 */
export const runNodeTests = (dir, testFiles, { timeoutMs = 20_000 } = {}) =>
  new Promise((resolve) => {
    if (testFiles.length === 0) return resolve({ passed: 0, failed: 0, summary: "error: no test files" })
    const child = spawn(process.execPath, ["--test", "--test-reporter=tap", `--test-timeout=${timeoutMs}`, ...testFiles], {
      cwd: dir,
      env: testEnv(),
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    const collect = (chunk) => {
      if (out.length < 256 * 1024) out += chunk
    }
    child.stdout.setEncoding("utf8").on("data", collect)
    child.stderr.setEncoding("utf8").on("data", collect)
    const backstop = setTimeout(() => child.kill("SIGKILL"), timeoutMs + 5_000)
    child.on("error", (e) => {
      clearTimeout(backstop)
      resolve({ passed: 0, failed: 0, summary: `error: cannot run tests (${e.message})` })
    })
    child.on("close", (code, signal) => {
      clearTimeout(backstop)
      const result = summarizeTap(out.split(dir + "/").join("").split(dir).join("."))
      if (signal !== null && result.passed + result.failed === 0) result.summary = `error: tests killed after ${timeoutMs + 5_000} ms`
      resolve({ ...result, exitCode: code })
    })
  })

const yamlField = (block, key) => {
  const m = block.match(new RegExp(`^ {2}${key}: (.*)$`, "m"))
  if (m === null) return undefined
  if (m[1] !== "|-") return m[1].replace(/^'(.*)'$|^"(.*)"$/, "$1$2")
  // A block scalar: the first non-empty indented line is the message.
  const after = block.slice(m.index + m[0].length).split("\n").map((l) => l.trim())
  return after.find((l) => l !== "")
}

/** `N passed, M failed` and the first failure in one line: `name: expected X, got Y` or `name: Error: message`. */
export const summarizeTap = (tap) => {
  const count = (key) => Number(tap.match(new RegExp(`^# ${key} (\\d+)$`, "m"))?.[1] ?? 0)
  const passed = count("pass")
  const failed = count("fail") + count("cancelled")
  let summary = `${passed} passed, ${failed} failed`
  const notOk = tap.match(/^not ok \d+ - (.*)$/m)
  if (notOk !== null) {
    const rest = tap.slice(notOk.index + notOk[0].length)
    const block = rest.slice(0, Math.max(0, rest.indexOf("\n  ...")))
    const expected = yamlField(block, "expected")
    const actual = yamlField(block, "actual")
    const errorName = yamlField(block, "name")
    const message = yamlField(block, "error")
    // A file that does not even load reports 'test failed'; the real error is in the TAP comments.
    const loadError = tap.match(/^# (\w*Error\b.*)$/m)?.[1]
    const detail = expected !== undefined && actual !== undefined
      ? `expected ${expected}, got ${actual}`
      : loadError !== undefined && message === "test failed"
      ? loadError
      : `${errorName ?? "Error"}: ${message ?? "failed"}`
    summary += `\n${notOk[1]}: ${detail}`
  } else if (passed + failed === 0) {
    summary = `error: no test results\n${tap.trim().split("\n").slice(0, 2).join("\n")}`
  }
  return { passed, failed, summary: truncate(summary, MAX_TEST_SUMMARY_CHARS) }
}
