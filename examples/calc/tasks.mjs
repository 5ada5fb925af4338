#!/usr/bin/env node
/**
 * Generates the calc task sets: plain expressions such as `37+48` or `(4+9)*3` (small integers,
 * 2–3 operands, integer results in 0..999) and, optionally, short templated word problems.
 * Deterministic for a seed. The splits are disjoint by expression, so no test arithmetic is
 * ever seen in training, whatever the wording.
 *
 *   node examples/calc/tasks.mjs [--seed 1] [--train 2000] [--test 100] [--word 0] [--out examples/calc/tasks]
 *
 * Task line: {"id", "input": {"question"}, "split", "answer", "expression"} — `answer` and
 * `expression` are for the verifier and the demo generator; the harness sees only `input`.
 */
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { parseArgs } from "node:util"
import { evaluate } from "./calculator.mjs"
import { makeRandom } from "./random.mjs"

export const DEFAULTS = { seed: 1, train: 2000, test: 100, word: 0 }

/** `a op b`, the operands sized so that the result stays small and exact. */
const twoOperands = (r) => {
  const op = r.pick(["+", "-", "*", "/"])
  if (op === "+") return `${r.int(2, 99)}+${r.int(2, 99)}`
  if (op === "-") {
    const a = r.int(10, 99)
    return `${a}-${r.int(2, a)}`
  }
  if (op === "*") return r.next() < 0.5 ? `${r.int(2, 12)}*${r.int(2, 30)}` : `${r.int(2, 30)}*${r.int(2, 12)}`
  const b = r.int(2, 12)
  return `${b * r.int(2, 12)}/${b}`
}

/** `a op b op c`, sometimes with parentheses; the caller rejects results that are not small integers. */
const threeOperands = (r) => {
  const op1 = r.pick(["+", "-", "*"])
  const op2 = r.pick(["+", "-", "*"])
  const n = (op) => (op === "*" ? r.int(2, 12) : r.int(2, 50))
  const [a, b, c] = [n(op1), op1 === "*" || op2 === "*" ? r.int(2, 12) : r.int(2, 50), n(op2)]
  const plain = `${a}${op1}${b}${op2}${c}`
  const shape = r.next()
  const grouped = shape < 0.2 ? `(${a}${op1}${b})${op2}${c}` : shape < 0.35 ? `${a}${op1}(${b}${op2}${c})` : plain
  // Parentheses only where they change the result, as a person would write it.
  return evaluate(grouped) === evaluate(plain) ? plain : grouped
}

/** Word problems: a template per operation, filled from small lists. */
const NAMES = ["Ann", "Ben", "Cleo", "Dev", "Eva", "Finn", "Gia", "Hugo"]
const THINGS = ["apples", "pens", "coins", "cards", "stamps", "books"]
const wordProblem = (r) => {
  const who = r.pick(NAMES)
  const what = r.pick(THINGS)
  const kind = r.pick(["+", "-", "*", "/"])
  if (kind === "+") {
    const [a, b] = [r.int(2, 99), r.int(2, 99)]
    return { expression: `${a}+${b}`, question: `${who} has ${a} ${what} and gets ${b} more. How many now?` }
  }
  if (kind === "-") {
    const a = r.int(10, 99)
    const b = r.int(2, a)
    return { expression: `${a}-${b}`, question: `${who} has ${a} ${what} and gives away ${b}. How many are left?` }
  }
  if (kind === "*") {
    const [a, b] = [r.int(2, 12), r.int(2, 30)]
    return { expression: `${a}*${b}`, question: `${who} buys ${a} boxes of ${b} ${what}. How many ${what}?` }
  }
  const b = r.int(2, 12)
  const a = b * r.int(2, 12)
  return { expression: `${a}/${b}`, question: `${who} shares ${a} ${what} equally among ${b} friends. How many each?` }
}

/** One task's question, expression and answer (rejection-sampled to a small non-negative integer). */
const drawTask = (r, wordFraction) => {
  for (let i = 0; i < 1000; i++) {
    const task = r.next() < wordFraction
      ? wordProblem(r)
      : (() => {
        const expression = r.next() < 0.6 ? twoOperands(r) : threeOperands(r)
        return { expression, question: expression }
      })()
    const answer = evaluate(task.expression)
    if (Number.isInteger(answer) && answer >= 0 && answer <= 999) return { ...task, answer }
  }
  throw new Error("could not draw a task (this is a bug in the generator)")
}

/** Both splits; test is drawn first, then train skips every expression already used. */
export const generateTasks = (options = {}) => {
  const { seed, train, test, word } = { ...DEFAULTS, ...options }
  const r = makeRandom(seed)
  const used = new Set()
  const draw = (split, count) => {
    const width = String(count).length
    const tasks = []
    for (let guard = 0; tasks.length < count; guard++) {
      if (guard > count * 100) throw new Error(`cannot find ${count} distinct ${split} tasks`)
      const t = drawTask(r, word)
      if (used.has(t.expression)) continue
      used.add(t.expression)
      const id = `calc-${split}-${String(tasks.length).padStart(width, "0")}`
      tasks.push({ id, input: { question: t.question }, split, answer: t.answer, expression: t.expression })
    }
    return tasks
  }
  const testTasks = draw("test", test)
  return { train: draw("train", train), test: testTasks }
}

export const toJsonl = (rows) => rows.map((row) => JSON.stringify(row)).join("\n") + "\n"

const main = () => {
  const { values } = parseArgs({
    options: {
      seed: { type: "string", default: String(DEFAULTS.seed) },
      train: { type: "string", default: String(DEFAULTS.train) },
      test: { type: "string", default: String(DEFAULTS.test) },
      word: { type: "string", default: String(DEFAULTS.word) },
      out: { type: "string", default: fileURLToPath(new URL("./tasks", import.meta.url)) }
    }
  })
  const num = (name, lo, hi) => {
    const v = Number(values[name])
    if (!Number.isFinite(v) || v < lo || v > hi) throw new Error(`--${name} must be a number in [${lo}, ${hi}], got ${values[name]}`)
    return v
  }
  const sets = generateTasks({ seed: num("seed", 0, 2 ** 32 - 1), train: num("train", 0, 1e6), test: num("test", 0, 1e6), word: num("word", 0, 1) })
  mkdirSync(values.out, { recursive: true })
  for (const split of ["train", "test"]) writeFileSync(join(values.out, `${split}.jsonl`), toJsonl(sets[split]))
  process.stdout.write(`wrote ${sets.train.length} train and ${sets.test.length} test tasks to ${values.out}\n`)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    main()
  } catch (e) {
    process.stderr.write(`tasks: ${e.message}\n`)
    process.exit(2)
  }
}
