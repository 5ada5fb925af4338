// The spawner process (see spawner.ts): a small Node process that starts commands for the reins
// process, so that the fork behind each spawn copies this process's few pages, not the page tables
// of a process holding a model. Plain JavaScript: it starts without a TypeScript loader.
//
// Messages in:  { id, file, args, cwd, env, nice }
// Messages out: { id, type: "spawn", pid } | { id, type: "error", code, message, started }
//               { id, type: "stdout" | "stderr", data } | { id, type: "exit", code, signal }
//               { id, type: "close" }
import { spawn } from "node:child_process"
import { writeFileSync } from "node:fs"
import { setPriority } from "node:os"

const send = (message) => {
  if (process.connected) process.send(message)
}

// Best effort (a child that already exited, no autogroups on this system): raising niceness needs
// no privilege. The child is a session leader (detached), so its autogroup is its own; the
// autogroup's niceness is what weighs it against the reins process when autogroups are on.
const renice = (pid, nice) => {
  try {
    setPriority(pid, nice)
    writeFileSync(`/proc/${pid}/autogroup`, String(nice))
  } catch {}
}

process.on("message", ({ id, file, args, cwd, env, nice }) => {
  let child
  try {
    child = spawn(file, args, { cwd, env, detached: true, stdio: ["ignore", "pipe", "pipe"] })
  } catch (e) {
    // Invalid arguments (a NUL byte in argv or env, ...) throw instead of emitting 'error'.
    return send({ id, type: "error", code: e.code ?? null, message: e.message, started: false })
  }
  child.once("spawn", () => {
    if (nice > 0) renice(child.pid, nice)
    send({ id, type: "spawn", pid: child.pid })
  })
  child.on("error", (e) => send({ id, type: "error", code: e.code ?? null, message: e.message, started: child.pid !== undefined }))
  child.stdout.on("data", (data) => send({ id, type: "stdout", data }))
  child.stderr.on("data", (data) => send({ id, type: "stderr", data }))
  child.once("exit", (code, signal) => send({ id, type: "exit", code, signal }))
  child.once("close", () => send({ id, type: "close" }))
})

// The reins process went away: its groups are its reaper's business; this helper just ends.
process.on("disconnect", () => process.exit(0))

// Ctrl-C in a terminal (or `kill` of the process group) reaches this helper too. It must outlive
// the signal: the reins process is still cancelling its rollouts through it, and without it every
// running attempt would be recorded as killed instead of cancelled. It ends on disconnect above.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, () => {})
