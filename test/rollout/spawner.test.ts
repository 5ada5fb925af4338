/**
 * The spawner process starts every harness and verifier (a fork of the reins process itself would
 * stall the device's thread). Its children are real processes in their own groups; when the
 * spawner dies, their ends are still reported, and the next spawn brings up a new spawner. It
 * ignores the signals of a Ctrl-C: the reins process is still stopping its children through it.
 */
import { spawnDetached, type SpawnedChild } from "@reins/rollout"
import { readFileSync } from "node:fs"
import { afterEach, describe, expect, it } from "vitest"

const started: Array<number> = []
afterEach(() => {
  for (const pid of started.splice(0)) {
    try {
      process.kill(-pid, "SIGKILL")
    } catch {
      // already gone
    }
  }
})

const whenSpawned = (c: SpawnedChild) =>
  new Promise<number>((resolve, reject) => {
    c.once("spawn", () => {
      started.push(c.pid!)
      resolve(c.pid!)
    })
    c.once("error", reject)
  })
const whenClosed = (c: SpawnedChild) => new Promise<void>((resolve) => c.once("close", () => resolve()))
const statFields = (pid: number) => {
  const s = readFileSync(`/proc/${pid}/stat`, "utf8")
  return s.slice(s.lastIndexOf(")") + 2).split(" ")
}

describe.runIf(process.platform === "linux")("spawner process", { timeout: 20_000 }, () => {
  it("runs a child in its own group, off the reins process, with its output and exit status", async () => {
    const c = spawnDetached(process.execPath, ["-e", "process.stdout.write('out'); process.stderr.write('err'); process.exit(7)"], { env: {} })
    let out = "", err = ""
    c.stdout.on("data", (d: Buffer) => (out += d))
    c.stderr.on("data", (d: Buffer) => (err += d))
    const exit = new Promise<[number | null, string | null]>((resolve) => c.once("exit", (code, signal) => resolve([code, signal])))
    const closed = whenClosed(c)
    const pid = await whenSpawned(c)
    expect(pid).toBeGreaterThan(0)
    expect(await exit).toEqual([7, null])
    await closed
    expect([out, err]).toEqual(["out", "err"])
  })

  it("reports a command that cannot start", async () => {
    const c = spawnDetached("/nonexistent/reins-command", [], { env: {} })
    await expect(whenSpawned(c)).rejects.toMatchObject({ code: "ENOENT" })
  })

  it("outlives Ctrl-C (SIGINT, SIGTERM, SIGHUP to it): its children still run and their ends are reported as they are", async () => {
    const c = spawnDetached(process.execPath, ["-e", "setTimeout(() => process.exit(5), 1000)"], { env: {} })
    const pid = await whenSpawned(c)
    const spawner = Number(statFields(pid)[1])
    const exit = new Promise<unknown[]>((resolve) => c.once("exit", (...a) => resolve(a)))
    for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.kill(spawner, signal)
    expect(await exit).toEqual([5, null])
    expect(statFields(spawner)[0]).not.toBe("Z") // still there
  })

  it("reports its children gone when it dies, and the next spawn starts a new spawner", async () => {
    const c = spawnDetached(process.execPath, ["-e", "setTimeout(() => {}, 30000)"], { env: {} })
    const pid = await whenSpawned(c)
    const [, ppid, pgrp] = statFields(pid)
    expect(Number(pgrp)).toBe(pid) // its own process group
    expect(Number(ppid)).not.toBe(process.pid) // started by the spawner, not by us
    const exit = new Promise<unknown[]>((resolve) => c.once("exit", (...a) => resolve(a)))
    const closed = whenClosed(c)
    process.kill(Number(ppid), "SIGKILL")
    expect(await exit).toEqual([null, null])
    await closed
    const next = spawnDetached(process.execPath, ["-e", "setTimeout(() => {}, 200)"], { env: {} })
    const nextClosed = whenClosed(next)
    const nextPid = await whenSpawned(next)
    expect(Number(statFields(nextPid)[1])).not.toBe(Number(ppid))
    await nextClosed
  })
})
