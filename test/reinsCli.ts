/** The `reins` CLI as a real child process, for the tests that run it: bounded lifetimes, every child killable at the end. */
import { type ChildProcess, spawn } from "node:child_process"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

export const repoRoot = fileURLToPath(new URL("..", import.meta.url))
/** The `reins` command as installed (`bin` of the reins package). */
export const reinsBin = join(repoRoot, "packages/reins/bin/reins.js")
const children = new Set<ChildProcess>()

/**
 * The environment of a `reins` child: the test's, with `extra`, minus the `reins-source`
 * condition (set when the tests run from sources, REINS_TEST_SOURCES=1). The CLI then runs
 * compiled (dist/, rebuilt before the tests by test/globalSetup.ts), as a user runs it — and
 * starts ~1 s faster than through tsx, which adds up over the suite.
 */
export const reinsEnv = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => {
  const env = { ...process.env, ...extra }
  const options = (env.NODE_OPTIONS ?? "").split(/\s+/).filter((o) => o !== "" && o !== "--conditions=reins-source").join(" ")
  return { ...env, NODE_OPTIONS: options }
}

/** SIGKILLs every child still running (call from `afterAll`). */
export const killReinsChildren = () => {
  for (const child of children) child.kill("SIGKILL")
}

export interface ReinsChild {
  readonly child: ChildProcess
  readonly exited: Promise<number | null>
  readonly stdout: () => string
  readonly stderr: () => string
  /** stdout and stderr as they interleaved. */
  readonly output: () => string
}

/** Starts `reins ...args`. */
export const spawnReins = (args: ReadonlyArray<string>, options: { readonly cwd?: string; readonly env?: Record<string, string> } = {}): ReinsChild => {
  const child = spawn(process.execPath, [reinsBin, ...args], {
    cwd: options.cwd ?? repoRoot,
    env: reinsEnv(options.env),
    stdio: ["ignore", "pipe", "pipe"]
  })
  children.add(child)
  let stdout = ""
  let stderr = ""
  let output = ""
  child.stdout!.on("data", (d) => ((stdout += d), (output += d)))
  child.stderr!.on("data", (d) => ((stderr += d), (output += d)))
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on("error", reject)
    child.on("close", (code) => {
      children.delete(child)
      resolve(code)
    })
  })
  return { child, exited, stdout: () => stdout, stderr: () => stderr, output: () => output }
}

export interface ReinsRun {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs `reins ...args` to its end, killed after `timeoutMs`. */
export const runReins = async (args: ReadonlyArray<string>, timeoutMs: number, env?: Record<string, string>): Promise<ReinsRun> => {
  const run = spawnReins(args, env === undefined ? {} : { env })
  const timer = setTimeout(() => run.child.kill("SIGKILL"), timeoutMs)
  try {
    const code = await run.exited
    return { code, stdout: run.stdout(), stderr: run.stderr() }
  } finally {
    clearTimeout(timer)
  }
}
