#!/usr/bin/env node
/**
 * `--reward shaped` for the calc harness: the real verifier decides (`node shaped-verify.mjs CMD
 * [ARGS...]` runs it unchanged, with the same environment); a right answer scores 1 as before. A
 * wrong answer scores partial credit for being close instead of 0:
 *
 *   0.5 × max(0, 1 − |answer − reference| / max(10, |reference|))      (no number: 0)
 *
 * so a weak base policy, which rarely answers exactly, still has reward variance within its
 * groups and the Trainer has something to learn from (with 0/1 rewards every such group has zero
 * variance and its update is skipped). pass@1 is unchanged: it counts rewards >= 1, i.e. exact
 * answers only. A verifier error (non-zero exit) stays an error.
 */
import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"

const fail = (message, code = 2) => {
  process.stderr.write(`shaped verifier: ${message}\n`)
  process.exit(code)
}

const [command, ...args] = process.argv.slice(2)
if (command === undefined) fail("usage: node shaped-verify.mjs VERIFIER_CMD [ARGS...]")
const real = spawnSync(command, args, { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" })
if (real.error) fail(`cannot run ${command}: ${real.error.message}`)
if (real.status !== 0) fail(`the verifier exited with ${real.status ?? real.signal}`, real.status ?? 2)
const lines = real.stdout.trim().split(/\r?\n/)
const verdict = Number(lines.at(-1))
if (!Number.isFinite(verdict)) fail(`the verifier printed no reward: ${JSON.stringify(real.stdout.slice(-200))}`)
if (verdict >= 1) {
  process.stdout.write(`${verdict}\n`)
  process.exit(0)
}

const read = (file, fallback) => {
  try {
    return file ? readFileSync(file, "utf8") : fallback
  } catch {
    return fallback
  }
}
let reference
try {
  reference = JSON.parse(read(process.env.REINS_TASK_FILE, process.env.REINS_TASK) ?? "null")?.answer
} catch {
  reference = undefined
}
const stdout = read(process.env.REINS_STDOUT_FILE, "")
const line = stdout.split(/\r?\n/).map((l) => l.trim()).filter((l) => l.startsWith("ANSWER:")).at(-1)
const given = Number((line ?? "").slice("ANSWER:".length).trim())
const partial =
  typeof reference === "number" && line !== undefined && /\d/.test(line) && Number.isFinite(given)
    ? 0.5 * Math.max(0, 1 - Math.abs(given - reference) / Math.max(10, Math.abs(reference)))
    : 0
process.stdout.write(`${Number(partial.toFixed(4))}\n`)
