#!/usr/bin/env node
/**
 * Demonstrations for supervised fine-tuning of a tiny base policy: the conversations the mini-swe
 * harness has, one JSON object per line, `{"messages": [...], "tools": [...]}` in OpenAI chat
 * format exactly as the harness sends them (plus the final assistant turn). The tools really run
 * (a temp copy of each package, real `node --test`), so every observation is what the harness
 * would have shown.
 *
 * Mixed quality on purpose: a base policy should start mediocre and, above all, prefer a wrong
 * move, so that RL has to change what it prefers (greedy pass@1 must rise, not only sampled).
 * Kinds (fractions are options; `correct` gets the rest):
 *   decoy     reads the file, makes the task's plausible wrong edit, runs the tests (they still
 *             fail) and says "Fixed." anyway                                        (default 0.45)
 *   give-up   reads the file, runs the tests, gives up                              (0.15)
 *   no-tool   answers at once that the code looks correct                          (0.10)
 *   correct   reads the file, makes the reference fix, runs the tests (they pass)  (the rest: 0.30)
 * A `--test-first` fraction of decoy and correct demos also runs the tests before editing (0.2),
 * so running the tests first is no tell of a good or bad episode (kept low: a tiny policy's context is short).
 *
 *   node examples/mini-swe/demos.mjs [--tasks examples/mini-swe/tasks/train.jsonl] [--n 1000] [--seed 1]
 *        [--decoy 0.45] [--give-up 0.15] [--no-tool 0.1] [--test-first 0.2] [--out examples/mini-swe/demos.jsonl]
 */
import { readFileSync, writeFileSync } from "node:fs"
import { availableParallelism } from "node:os"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { TOOLS, assistantMessage, firstMessages, openWorkspace, packageFiles, runToolCall } from "./agent.mjs"
import { makeRandom } from "./random.mjs"

export const DEMO_DEFAULTS = { n: 1000, seed: 1, decoy: 0.45, giveUp: 0.15, noTool: 0.1, testFirst: 0.2 }
export const KINDS = ["decoy", "give-up", "no-tool", "correct"]

const FINAL = { correct: "Fixed.", decoy: "Fixed.", "give-up": "I could not find the bug.", "no-tool": "The code looks correct." }

const toolCallId = (r) => {
  // The Gateway's shape: `call_` + 12 random base64url characters + the call's index.
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
  return `call_${Array.from({ length: 12 }, () => alphabet[r.int(0, 63)]).join("")}0`
}

/** A test run killed by its timeout: the machine was too busy, not a fact about the demo. */
class TestsTimedOut extends Error {}
const ATTEMPTS = 3

/** One conversation of the given kind; a demo whose tests timed out is made again (up to 3 times). */
const demo = async (task, plan) => {
  for (let attempt = 1; ; attempt++) {
    try {
      return await demoOnce(task, plan)
    } catch (e) {
      if (!(e instanceof TestsTimedOut) || attempt === ATTEMPTS) throw e
      process.stderr.write(`demos: ${e.message}; making it again (attempt ${attempt + 1} of ${ATTEMPTS})\n`)
    }
  }
}

/** One conversation of the given kind, with the tools really run on a temp copy of the package. */
const demoOnce = async (task, plan) => {
  const messages = firstMessages(task.input)
  if (plan.kind === "no-tool") return [...messages, assistantMessage(FINAL["no-tool"])]
  const ws = openWorkspace(packageFiles(task.input), "mini-swe-demo-")
  const results = []
  const call = async (name, args, id) => {
    const c = { id, type: "function", function: { name, arguments: JSON.stringify(args) } }
    messages.push(assistantMessage(null, [c]))
    // A generous timeout: no demo edit can hang, and a busy machine must not turn a pass into a timeout.
    const result = await runToolCall(ws, c, { timeoutMs: 30_000 })
    if (result.startsWith("error: tests killed after")) throw new TestsTimedOut(`task ${task.id}: ${result}`)
    messages.push({ role: "tool", tool_call_id: id, content: result })
    results.push(result)
    return result
  }
  try {
    const [id1, id2, id3, id4] = plan.ids
    await call("read_file", { path: task.fix.path }, id1)
    if (plan.kind === "give-up") {
      await call("run_tests", {}, id2)
    } else {
      if (plan.testFirst) await call("run_tests", {}, id4)
      const edit = plan.kind === "correct" ? task.fix : task.decoy
      await call("replace_in_file", { path: edit.path, old: edit.old, new: edit.new }, id2)
      const after = await call("run_tests", {}, id3)
      // A demo must show what it claims: the fix passes, the decoy does not.
      if ((plan.kind === "correct") !== / 0 failed$/.test(after) || results.some((x) => x.startsWith("error"))) {
        throw new Error(`task ${task.id}: ${plan.kind} demo got ${JSON.stringify(results)}`)
      }
    }
  } finally {
    ws.close()
  }
  return [...messages, assistantMessage(FINAL[plan.kind])]
}

/** Exact counts per kind (rounded), then shuffled: the mix is what was asked, not a sample of it. */
const kindsFor = (r, n, o) => {
  const counts = { decoy: Math.round(n * o.decoy), "give-up": Math.round(n * o.giveUp), "no-tool": Math.round(n * o.noTool) }
  counts.correct = n - counts.decoy - counts["give-up"] - counts["no-tool"]
  if (counts.correct < 0) throw new Error("--decoy + --give-up + --no-tool must not exceed 1")
  return r.shuffle(KINDS.flatMap((k) => Array(counts[k]).fill(k)))
}

/**
 * Runs `fn` over `items` with at most `limit` in flight, keeping the order. After a failure no new
 * item starts and the ones in flight finish (and remove their temp dirs) before it is reported.
 */
const mapLimit = async (items, limit, fn) => {
  const out = new Array(items.length)
  let next = 0
  let failed = false
  const worker = async () => {
    while (next < items.length && !failed) {
      const i = next++
      try {
        out[i] = await fn(items[i], i)
      } catch (e) {
        failed = true
        throw e
      }
    }
  }
  const settled = await Promise.allSettled(Array.from({ length: Math.min(limit, items.length) }, worker))
  const error = settled.find((s) => s.status === "rejected")
  if (error !== undefined) throw error.reason
  return out
}

/** Demos over train tasks (each used at most once): `{kind, taskId, messages, tools}`. All randomness is drawn up front, so the output does not depend on scheduling. */
export const makeDemos = async (tasks, options = {}) => {
  const o = { ...DEMO_DEFAULTS, ...options }
  const train = tasks.filter((t) => t.split === "train")
  if (o.n > train.length) throw new Error(`asked for ${o.n} demos but there are only ${train.length} train tasks`)
  for (const t of train) {
    if (typeof t.fix?.old !== "string" || typeof t.decoy?.old !== "string") throw new Error(`task ${t.id} has no fix/decoy edits`)
  }
  const r = makeRandom(o.seed)
  const chosen = r.shuffle(train).slice(0, o.n)
  const plans = kindsFor(r, o.n, o).map((kind) => ({ kind, testFirst: r.next() < o.testFirst, ids: [1, 2, 3, 4].map(() => toolCallId(r)) }))
  const concurrency = o.concurrency ?? Math.max(2, availableParallelism() * 2)
  let done = 0
  return mapLimit(plans, concurrency, async (plan, i) => {
    const messages = await demo(chosen[i], plan)
    if (++done % 100 === 0) o.onProgress?.(done, plans.length)
    return { kind: plan.kind, taskId: chosen[i].id, messages, tools: TOOLS }
  })
}

const main = async () => {
  const here = (p) => fileURLToPath(new URL(p, import.meta.url))
  const { values } = parseArgs({
    options: {
      tasks: { type: "string", default: here("./tasks/train.jsonl") },
      out: { type: "string", default: here("./demos.jsonl") },
      n: { type: "string", default: String(DEMO_DEFAULTS.n) },
      seed: { type: "string", default: String(DEMO_DEFAULTS.seed) },
      decoy: { type: "string", default: String(DEMO_DEFAULTS.decoy) },
      "give-up": { type: "string", default: String(DEMO_DEFAULTS.giveUp) },
      "no-tool": { type: "string", default: String(DEMO_DEFAULTS.noTool) },
      "test-first": { type: "string", default: String(DEMO_DEFAULTS.testFirst) }
    }
  })
  const num = (name, lo, hi) => {
    const v = Number(values[name])
    if (!Number.isFinite(v) || v < lo || v > hi) throw new Error(`--${name} must be a number in [${lo}, ${hi}], got ${values[name]}`)
    return v
  }
  const options = {
    n: num("n", 0, 1e6), seed: num("seed", 0, 2 ** 32 - 1), decoy: num("decoy", 0, 1),
    giveUp: num("give-up", 0, 1), noTool: num("no-tool", 0, 1), testFirst: num("test-first", 0, 1)
  }
  const tasks = readFileSync(values.tasks, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l))
  const demos = await makeDemos(tasks, { ...options, onProgress: (done, n) => process.stderr.write(`${done}/${n} demos\n`) })
  writeFileSync(values.out, demos.map(({ messages, tools }) => JSON.stringify({ messages, tools })).join("\n") + (demos.length > 0 ? "\n" : ""))
  const mix = KINDS.map((k) => `${k} ${demos.filter((d) => d.kind === k).length}`).join(", ")
  process.stdout.write(`wrote ${demos.length} demos to ${values.out} (${mix})\n`)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    process.stderr.write(`demos: ${e.message}\n`)
    process.exit(2)
  })
}
