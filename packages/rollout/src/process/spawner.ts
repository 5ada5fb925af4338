/**
 * Starts commands through a small helper process instead of from the reins process itself.
 *
 * Why: on Linux, Node (libuv) starts a child with fork() + exec(). A fork copies the page tables
 * of the whole parent and makes its memory copy-on-write until the child has exec'd; in a process
 * holding a model in a worker thread, every spawn stalls that thread's memory writes. Measured
 * here: a worker writing a 64 MB buffer in a 1.5 GB process fell from ~270 rounds/s to 2/s while
 * the main thread started `/bin/true` every 50 ms — and the device's updates ran 3–10× slower
 * while harnesses were being launched. The helper is a fresh Node process of a few tens of MB:
 * its forks are cheap and touch nothing of ours.
 *
 * `spawnDetached` returns a child-process-like object (pid, stdout/stderr streams, the events
 * "spawn", "error", "exit", "close") so that `processGroup` does not care where the child runs.
 * Children are their own process group (detached); signals go to them directly by pgid. If the
 * helper dies, its running children are reported as exited (the group supervisor then stops what
 * is left of their groups) and the next spawn starts a new helper.
 */
import { type ChildProcess, fork } from "node:child_process"
import { EventEmitter } from "node:events"
import { PassThrough } from "node:stream"
import { fileURLToPath } from "node:url"

const helperPath = fileURLToPath(new URL("./spawner-child.mjs", import.meta.url))

/** What `processGroup` uses of a child process. */
export class SpawnedChild extends EventEmitter {
  constructor(readonly id: number) {
    super()
  }
  pid: number | undefined = undefined
  readonly stdout = new PassThrough()
  readonly stderr = new PassThrough()
  exited = false
  closed = false
  /** Stops following the child's output (a process that escaped its group holds it open). */
  detach(): void {
    release(this.id)
    this.stdout.destroy()
    this.stderr.destroy()
  }
}

type Message =
  | { readonly id: number; readonly type: "spawn"; readonly pid: number }
  | { readonly id: number; readonly type: "error"; readonly code: string | null; readonly message: string; readonly started: boolean }
  | { readonly id: number; readonly type: "stdout" | "stderr"; readonly data: Uint8Array }
  | { readonly id: number; readonly type: "exit"; readonly code: number | null; readonly signal: NodeJS.Signals | null }
  | { readonly id: number; readonly type: "close" }

let helper: ChildProcess | undefined
let nextId = 0
const children = new Map<number, SpawnedChild>()

/** Forgets a child; with none left, the channel no longer keeps the process alive. */
const release = (id: number) => {
  children.delete(id)
  if (children.size === 0) helper?.channel?.unref()
}

const finish = (child: SpawnedChild) => {
  child.stdout.end()
  child.stderr.end()
  child.closed = true
  child.emit("close")
}

const onMessage = (m: Message) => {
  const child = children.get(m.id)
  if (child === undefined) return
  switch (m.type) {
    case "spawn":
      child.pid = m.pid
      return void child.emit("spawn")
    case "error": {
      const error = Object.assign(new Error(m.message), { code: m.code ?? undefined })
      if (!m.started) release(m.id)
      return void child.emit("error", error)
    }
    case "stdout":
    case "stderr":
      return void child[m.type].write(Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength))
    case "exit":
      child.exited = true
      return void child.emit("exit", m.code, m.signal)
    case "close":
      release(m.id)
      return finish(child)
  }
}

/** The helper went away: children it started are reported gone, pending spawns failed. */
const onHelperGone = (gone: ChildProcess) => {
  if (helper !== gone) return
  helper = undefined
  for (const [id, child] of children) {
    children.delete(id)
    if (child.pid === undefined) {
      child.emit("error", Object.assign(new Error("the spawner process exited"), { code: "ESPAWNER" }))
      continue
    }
    if (!child.exited) child.emit("exit", null, null)
    if (!child.closed) finish(child)
  }
}

const startHelper = (): ChildProcess => {
  const p = fork(helperPath, [], { serialization: "advanced", stdio: ["ignore", "inherit", "inherit", "ipc"], execArgv: [] })
  p.on("message", (m) => onMessage(m as Message))
  p.once("exit", () => onHelperGone(p))
  p.on("error", () => onHelperGone(p))
  // Neither the helper nor its channel keeps the reins process alive.
  p.unref()
  p.channel?.unref()
  return p
}

/** Starts `file args` in its own process group, through the helper process, at niceness `nice` (default: inherited). */
export const spawnDetached = (
  file: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd?: string | undefined; readonly env: Readonly<Record<string, string>>; readonly nice?: number }
): SpawnedChild => {
  helper ??= startHelper()
  const child = new SpawnedChild(nextId++)
  children.set(child.id, child)
  // While a child runs, the channel must keep the process alive to hear its end.
  helper.channel?.ref()
  helper.send({ id: child.id, file, args, cwd: options.cwd, env: options.env, nice: options.nice ?? 0 })
  return child
}
