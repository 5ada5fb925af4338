/** Runs `reins serve` as a real child process and waits until it listens. */
import { type ChildProcess, spawn } from "node:child_process"
import { reinsBin as bin, reinsEnv } from "../reinsCli.js"

export interface Child {
  readonly proc: ChildProcess
  readonly url: string
  readonly output: () => string
  /** SIGKILL and wait for the exit. */
  readonly kill9: () => Promise<void>
  /** SIGTERM (graceful) and wait for the exit; SIGKILL after `graceMs`. */
  readonly stop: (graceMs?: number) => Promise<number | null>
}

export const startServe = (args: ReadonlyArray<string>, env: Record<string, string> = {}, timeoutMs = 45_000): Promise<Child> =>
  new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [bin, "serve", "--http", "127.0.0.1:0", ...args], {
      env: reinsEnv(env),
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)))
    const child: Child = {
      proc,
      url: "",
      output: () => out,
      kill9: async () => {
        if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL")
        await exited
      },
      stop: async (graceMs = 10_000) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode
        proc.kill("SIGTERM")
        const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs)
        const code = await exited
        clearTimeout(timer)
        return code
      }
    }
    const timer = setTimeout(() => {
      proc.kill("SIGKILL")
      reject(new Error(`reins serve did not start within ${timeoutMs} ms:\n${out}`))
    }, timeoutMs)
    const onData = (b: Buffer) => {
      out += b.toString()
      const m = /listening on (http:\/\/[^\s]+)\/v1/.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve({ ...child, url: m[1]! })
      }
    }
    proc.stdout!.on("data", onData)
    proc.stderr!.on("data", onData)
    proc.once("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`reins serve exited with ${code} before listening:\n${out}`))
    })
  })
