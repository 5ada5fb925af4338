#!/usr/bin/env node
/**
 * Demonstrations for supervised fine-tuning of a tiny base policy: the conversations the calc
 * harness has, one JSON object per line, `{"messages": [...], "tools": [...]}` in OpenAI chat
 * format exactly as the harness sends them (plus the final assistant turn).
 *
 * Mixed quality on purpose: a base policy should start mediocre and, above all, prefer a wrong
 * move, so that RL has to change what it prefers (greedy pass@1 must rise, not only sampled).
 * Kinds (fractions are options; `correct` gets the rest):
 *   direct            answers at once, without the tool, with a plausible wrong number (default 0.6)
 *   wrong-expression  calls calculate with a mistyped expression, answers its (wrong) result (0.05)
 *   miscopy           calls calculate correctly, then copies the result wrongly (0.05)
 *   correct           calls calculate correctly and answers its result (the rest: 0.3)
 *
 *   node examples/calc/demos.mjs [--tasks examples/calc/tasks/train.jsonl] [--n 2000] [--seed 1]
 *        [--direct 0.6] [--wrong-expression 0.05] [--miscopy 0.05] [--out examples/calc/demos.jsonl]
 */
import { readFileSync, writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { TOOLS, assistantMessage, firstMessages } from "./agent.mjs"
import { calculate, evaluate } from "./calculator.mjs"
import { makeRandom } from "./random.mjs"

export const DEMO_DEFAULTS = { n: 2000, seed: 1, direct: 0.6, wrongExpression: 0.05, miscopy: 0.05 }
export const KINDS = ["direct", "wrong-expression", "miscopy", "correct"]

/** A near miss: off by a little, off by ten, or two digits swapped; never the answer, never negative. */
const nearMiss = (r, answer) => {
  const swapped = (() => {
    const d = String(answer).split("")
    if (d.length < 2) return answer + 1
    const i = r.int(0, d.length - 2)
    ;[d[i], d[i + 1]] = [d[i + 1], d[i]]
    return Number(d.join(""))
  })()
  const candidates = [answer + r.int(1, 5), answer - r.int(1, 5), answer + 10, answer - 10, swapped]
  const miss = r.pick(candidates.filter((c) => c >= 0 && c !== answer))
  return miss ?? answer + 1
}

/** A typo in the expression: its last number bumped or an operator swapped, giving another valid result. */
const mistype = (r, expression, answer) => {
  const bumpLastNumber = () => {
    const last = [...expression.matchAll(/\d+/g)].at(-1)
    const end = last.index + last[0].length
    return expression.slice(0, last.index) + String(Number(last[0]) + r.int(1, 3)) + expression.slice(end)
  }
  const swapOperator = () => expression.replace(/[-+*]/, (op) => r.pick(["+", "-", "*"].filter((o) => o !== op)))
  for (let i = 0; i < 20; i++) {
    const wrong = r.next() < 0.5 ? bumpLastNumber() : swapOperator()
    const result = calculate(wrong)
    if (wrong !== expression && result !== String(answer) && !result.startsWith("error")) return wrong
  }
  return bumpLastNumber()
}

const toolCallId = (r) => {
  // The Gateway's shape: `call_` + 12 random base64url characters + the call's index.
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
  return `call_${Array.from({ length: 12 }, () => alphabet[r.int(0, 63)]).join("")}0`
}

/** One conversation of the given kind. */
const demo = (r, task, kind) => {
  const { question } = task.input
  const answer = task.answer
  // A guess, phrased the way a model that skips the tool tends to answer: one dominant opening, so
  // the base policy's single most likely move (what greedy decoding takes) is this wrong one.
  if (kind === "direct") {
    const guess = nearMiss(r, answer)
    return [...firstMessages(question), assistantMessage(`It is ${guess}.`)]
  }
  const expression = kind === "wrong-expression" ? mistype(r, task.expression, answer) : task.expression
  const result = calculate(expression)
  const final = kind === "miscopy" ? String(nearMiss(r, Number(result))) : result
  const id = toolCallId(r)
  return [
    ...firstMessages(question),
    assistantMessage(null, [{ id, type: "function", function: { name: "calculate", arguments: JSON.stringify({ expression }) } }]),
    { role: "tool", tool_call_id: id, content: result },
    assistantMessage(final)
  ]
}

/** Exact counts per kind (rounded), then shuffled: the mix is what was asked, not a sample of it. */
const kindsFor = (r, n, o) => {
  const counts = { direct: Math.round(n * o.direct), "wrong-expression": Math.round(n * o.wrongExpression), miscopy: Math.round(n * o.miscopy) }
  counts.correct = n - counts.direct - counts["wrong-expression"] - counts.miscopy
  if (counts.correct < 0) throw new Error("--direct + --wrong-expression + --miscopy must not exceed 1")
  return r.shuffle(KINDS.flatMap((k) => Array(counts[k]).fill(k)))
}

/** Demos over train tasks (each used at most once): `{kind, messages, tools}`. */
export const makeDemos = (tasks, options = {}) => {
  const o = { ...DEMO_DEFAULTS, ...options }
  const train = tasks.filter((t) => t.split === "train")
  if (o.n > train.length) throw new Error(`asked for ${o.n} demos but there are only ${train.length} train tasks`)
  for (const t of train) {
    if (typeof t.expression !== "string" || evaluate(t.expression) !== t.answer) throw new Error(`task ${t.id}: expression and answer disagree`)
  }
  const r = makeRandom(o.seed)
  const chosen = r.shuffle(train).slice(0, o.n)
  return kindsFor(r, o.n, o).map((kind, i) => ({ kind, messages: demo(r, chosen[i], kind), tools: TOOLS }))
}

const main = () => {
  const here = (p) => fileURLToPath(new URL(p, import.meta.url))
  const { values } = parseArgs({
    options: {
      tasks: { type: "string", default: here("./tasks/train.jsonl") },
      out: { type: "string", default: here("./demos.jsonl") },
      n: { type: "string", default: String(DEMO_DEFAULTS.n) },
      seed: { type: "string", default: String(DEMO_DEFAULTS.seed) },
      direct: { type: "string", default: String(DEMO_DEFAULTS.direct) },
      "wrong-expression": { type: "string", default: String(DEMO_DEFAULTS.wrongExpression) },
      miscopy: { type: "string", default: String(DEMO_DEFAULTS.miscopy) }
    }
  })
  const num = (name, lo, hi) => {
    const v = Number(values[name])
    if (!Number.isFinite(v) || v < lo || v > hi) throw new Error(`--${name} must be a number in [${lo}, ${hi}], got ${values[name]}`)
    return v
  }
  const options = {
    n: num("n", 0, 1e6), seed: num("seed", 0, 2 ** 32 - 1), direct: num("direct", 0, 1),
    wrongExpression: num("wrong-expression", 0, 1), miscopy: num("miscopy", 0, 1)
  }
  const tasks = readFileSync(values.tasks, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l))
  const demos = makeDemos(tasks, options)
  writeFileSync(values.out, demos.map(({ messages, tools }) => JSON.stringify({ messages, tools })).join("\n") + "\n")
  const mix = KINDS.map((k) => `${k} ${demos.filter((d) => d.kind === k).length}`).join(", ")
  process.stdout.write(`wrote ${demos.length} demos to ${values.out} (${mix})\n`)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    main()
  } catch (e) {
    process.stderr.write(`demos: ${e.message}\n`)
    process.exit(2)
  }
}
