#!/usr/bin/env node
/**
 * The mini-swe task generator: seeded, deterministic, one tiny package per task with ONE bug.
 *
 *   node examples/mini-swe/tasks.mjs --split train --n 1000 --seed 1 > examples/mini-swe/tasks/train.jsonl
 *   node examples/mini-swe/tasks.mjs --split test  --n 100  --seed 2 > examples/mini-swe/tasks/test.jsonl
 *   node examples/mini-swe/tasks.mjs --split train --n 1000 --seed 71 --pool wide > examples/mini-swe/tasks/train-wide.jsonl
 *
 * A task is a template (a function of 3-7 lines: a loop sum, a counter, a formula, a helper
 * call, a max/min scan, a clamp) with one bug from a family (off_by_one, wrong_cmp, wrong_arith,
 * wrong_const, swapped_args, missing_return). Function names and constants come from pools that
 * are disjoint between the splits, and two template × family combinations appear only in the
 * test split, so a policy cannot pass the test split by memorising training tasks.
 *
 * Every line carries, for the verifier and the demo generator only: `hidden_tests` (cases the
 * harness never sees; the verifier runs them together with the package's own tests), `fix` (the reference edit) and `decoy` (a plausible wrong edit).
 * Each bug is checked at generation time: the bug fails a visible case, the decoy fails a visible
 * case, the fix passes everything.
 */
import { pathToFileURL } from "node:url"
import { makeRandom } from "./random.mjs"

const POOLS = {
  train: {
    verbs: ["calc", "get", "make", "find", "compute", "eval", "build", "pick", "rate", "count", "sum", "score"],
    nouns: ["Total", "Score", "Level", "Price", "Weight", "Value", "Limit", "Rank", "Size", "Points", "Amount", "Cost"],
    helpers: ["mix", "blend", "combine", "merge", "fold", "step"],
    constants: [2, 3, 5, 6, 8, 9, 11, 13, 15]
  },
  test: {
    verbs: ["fetch", "derive", "solve", "check", "measure"],
    nouns: ["Budget", "Height", "Speed", "Depth", "Credit", "Margin"],
    helpers: ["join", "pair", "link"],
    constants: [4, 7, 12, 14]
  }
}
/**
 * `--pool wide` (train split only): the train pools plus hundreds of random letter-string names
 * and the constants 2–30, never a word or constant of the test pools. A policy trained on the
 * train pools alone learns their 144 function names and 9 constants by heart rather than how to
 * copy a name or a number from the file it read, which is what the test split's unseen pools ask for.
 */
export const widePool = (seed) => {
  const r = makeRandom(seed * 40503 + 11)
  const taken = new Set(Object.values(POOLS.test).flat().map((w) => String(w).toLowerCase()))
  const words = (count, capital) => {
    const out = new Set()
    while (out.size < count) {
      const letters = Array.from({ length: r.int(3, 7) }, () => String.fromCharCode(97 + r.int(0, 25))).join("")
      const word = capital ? letters[0].toUpperCase() + letters.slice(1) : letters
      if (!taken.has(letters)) out.add(word)
    }
    return [...out]
  }
  const testConstants = new Set(POOLS.test.constants)
  return {
    verbs: [...POOLS.train.verbs, ...words(300, false)],
    nouns: [...POOLS.train.nouns, ...words(300, true)],
    helpers: [...POOLS.train.helpers, ...words(100, false)],
    constants: Array.from({ length: 29 }, (_, i) => i + 2).filter((k) => !testConstants.has(k))
  }
}
const ARRAYS = ["xs", "items", "nums", "vals", "list", "data", "arr"]
const SCALARS = ["n", "m", "k", "t", "x", "y", "a", "b", "v", "w", "p", "q"]
const ACCS = ["acc", "sum", "total", "res", "out", "s", "c", "cnt"]
const INDEXES = ["i", "j", "idx"]
const CONST_NAMES = ["BASE", "RATE", "STEP", "SCALE", "FACTOR", "UNIT"]
const SOURCES = ["lib.mjs", "math.mjs", "util.mjs", "calc.mjs", "core.mjs", "index.mjs"]

export const FAMILIES = ["off_by_one", "wrong_cmp", "wrong_arith", "wrong_const", "swapped_args", "missing_return"]
/** Template × family pairs that only the test split uses (a held-out combination). */
export const HELD_OUT = [["count_cmp", "missing_return"], ["helper_call", "wrong_const"]]

const otherConstant = (r, k) => r.pick([k - 1, k + 1, k + 2, k * 2].filter((c) => c > 0 && c !== k))
const list = (xs) => `[${xs.join(", ")}]`
const randomList = (r, len) => Array.from({ length: len }, () => r.int(0, 9))
const flipOp = { "+": "-", "-": "+", "*": "+" }
/** A binary expression `L op R` written from parts so that a bug can change one operator or swap operands. */
const expr = (parts) => parts.join(" ")

/**
 * Each template: `vars(r, pool)` picks names and constants; `lines(v)` writes the correct code;
 * `issue(v)` the one-line spec; `args(r)` one test input; `bugs[family](v, r)` returns
 * `{ line, text, decoy: { line, text } }`: the buggy line and a plausible wrong edit of the buggy code.
 */
const TEMPLATES = {
  loop_sum: {
    vars: (r, pool) => {
      const [N, ACC, I] = [r.pick(SCALARS.filter((s) => s !== "i")), r.pick(ACCS), r.pick(INDEXES)]
      return { N, ACC, I, K: r.pick(pool.constants) }
    },
    lines: (v) => [
      `export function ${v.F}(${v.N}) {`,
      `  let ${v.ACC} = 0;`,
      `  for (let ${v.I} = 1; ${v.I} <= ${v.N}; ${v.I}++) {`,
      `    ${v.ACC} += ${v.I} * ${v.K};`,
      `  }`,
      `  return ${v.ACC};`,
      `}`
    ],
    issue: (v) => `${v.F}(${v.N}) should return the sum of ${v.I} * ${v.K} for ${v.I} from 1 to ${v.N}.`,
    args: (r) => [r.int(1, 6)],
    bugs: {
      off_by_one: (v) => ({
        line: 2,
        text: `  for (let ${v.I} = 1; ${v.I} < ${v.N}; ${v.I}++) {`,
        decoy: { line: 2, text: `  for (let ${v.I} = 0; ${v.I} < ${v.N}; ${v.I}++) {` }
      }),
      wrong_arith: (v) => ({ line: 3, text: `    ${v.ACC} += ${v.I} + ${v.K};`, decoy: { line: 3, text: `    ${v.ACC} -= ${v.I} + ${v.K};` } }),
      wrong_const: (v, r) => ({
        line: 3,
        text: `    ${v.ACC} += ${v.I} * ${otherConstant(r, v.K)};`,
        decoy: { line: 1, text: `  let ${v.ACC} = 1;` }
      }),
      missing_return: (v) => ({ line: 5, text: `  ${v.ACC};`, decoy: { line: 5, text: `  return ${v.N};` } })
    }
  },
  count_cmp: {
    vars: (r) => {
      const [XS, T, C, I] = [r.pick(ARRAYS), r.pick(["t", "k", "m", "lim", "min"]), r.pick(["c", "cnt", "count", "hits"]), r.pick(INDEXES)]
      return { XS, T, C, I, OP: r.pick([">=", ">", "<=", "<"]) }
    },
    lines: (v) => [
      `export function ${v.F}(${v.XS}, ${v.T}) {`,
      `  let ${v.C} = 0;`,
      `  for (let ${v.I} = 0; ${v.I} < ${v.XS}.length; ${v.I}++) {`,
      `    if (${v.XS}[${v.I}] ${v.OP} ${v.T}) ${v.C} += 1;`,
      `  }`,
      `  return ${v.C};`,
      `}`
    ],
    issue: (v) =>
      `${v.F}(${v.XS}, ${v.T}) should count the values in ${v.XS} that are ${
        { ">=": "at least", ">": "greater than", "<=": "at most", "<": "less than" }[v.OP]
      } ${v.T}.`,
    args: (r) => [randomList(r, r.int(3, 5)), r.int(1, 8)],
    bugs: {
      off_by_one: (v) => ({
        line: 2,
        text: `  for (let ${v.I} = 0; ${v.I} < ${v.XS}.length - 1; ${v.I}++) {`,
        decoy: { line: 2, text: `  for (let ${v.I} = 1; ${v.I} < ${v.XS}.length - 1; ${v.I}++) {` }
      }),
      wrong_cmp: (v) => {
        const near = { ">=": ">", ">": ">=", "<=": "<", "<": "<=" }[v.OP]
        const mirror = { ">=": "<", ">": "<=", "<=": ">", "<": ">=" }[v.OP]
        return {
          line: 3,
          text: `    if (${v.XS}[${v.I}] ${near} ${v.T}) ${v.C} += 1;`,
          decoy: { line: 3, text: `    if (${v.XS}[${v.I}] ${mirror} ${v.T}) ${v.C} += 1;` }
        }
      },
      wrong_const: (v) => ({ line: 1, text: `  let ${v.C} = 1;`, decoy: { line: 5, text: `  return ${v.C} + 1;` } }),
      missing_return: (v) => ({ line: 5, text: `  ${v.C};`, decoy: { line: 5, text: `  return ${v.T};` } })
    }
  },
  formula: {
    vars: (r, pool) => {
      const [A, B] = r.sample(SCALARS, 2)
      return { A, B, CN: r.pick(CONST_NAMES), K: r.pick(pool.constants), shape: r.int(0, 3) }
    },
    // Shapes 1 and 3 are asymmetric in (A, B): the only ones where swapping operands is a bug.
    // Operators sit at indexes 1 and 3 of every shape.
    parts: (v, a = v.A, b = v.B) =>
      [
        [v.CN, "+", a, "*", b],
        [a, "*", v.CN, "-", b],
        [`(${a}`, "+", `${b})`, "*", v.CN],
        [a, "-", b, "*", v.CN]
      ][v.shape],
    lines: (v) => [`export function ${v.F}(${v.A}, ${v.B}) {`, `  const ${v.CN} = ${v.K};`, `  return ${expr(TEMPLATES.formula.parts(v))};`, `}`],
    issue: (v) => `${v.F}(${v.A}, ${v.B}) should return ${expr(TEMPLATES.formula.parts(v)).replace(v.CN, String(v.K))}.`,
    args: (r) => [r.int(0, 9), r.int(0, 9)],
    bugs: {
      // Flip one operator (the bug); the decoy flips the other one too.
      wrong_arith: (v, r) => {
        const [bugAt, decoyAt] = r.shuffle([1, 3])
        const flip = (ps, at) => ps.map((t, k) => (k === at ? flipOp[t] : t))
        const bugged = flip(TEMPLATES.formula.parts(v), bugAt)
        return { line: 2, text: `  return ${expr(bugged)};`, decoy: { line: 2, text: `  return ${expr(flip(bugged, decoyAt))};` } }
      },
      wrong_const: (v, r) => {
        const wrong = otherConstant(r, v.K)
        const decoy = wrong + 1 === v.K ? wrong + 2 : wrong + 1
        return { line: 1, text: `  const ${v.CN} = ${wrong};`, decoy: { line: 1, text: `  const ${v.CN} = ${decoy};` } }
      },
      swapped_args: (v) => {
        const swapped = TEMPLATES.formula.parts(v, v.B, v.A)
        const flipped = swapped.map((t) => (t === "-" ? "+" : t))
        return { line: 2, text: `  return ${expr(swapped)};`, decoy: { line: 2, text: `  return ${expr(flipped)};` }, shapes: [1, 3] }
      },
      missing_return: (v) => ({ line: 2, text: `  ${expr(TEMPLATES.formula.parts(v))};`, decoy: { line: 2, text: `  return ${v.CN};` } })
    }
  },
  helper_call: {
    vars: (r, pool) => {
      const [P, Q, X, Y] = r.sample(SCALARS, 4)
      return { H: r.pick(pool.helpers), P, Q, X, Y, K: r.pick(pool.constants), shape: r.int(0, 2) }
    },
    body: (v, k = v.K, op = null) =>
      [`${v.P} * ${k} ${op ?? "-"} ${v.Q}`, `${v.P} ${op ?? "-"} ${v.Q} * ${k}`, `${v.P} * ${k} ${op ?? "+"} ${v.Q}`][v.shape],
    lines: (v) => [
      `function ${v.H}(${v.P}, ${v.Q}) {`,
      `  return ${TEMPLATES.helper_call.body(v)};`,
      `}`,
      `export function ${v.F}(${v.X}, ${v.Y}) {`,
      `  return ${v.H}(${v.X}, ${v.Y});`,
      `}`
    ],
    issue: (v) => `${v.F}(${v.X}, ${v.Y}) should return ${TEMPLATES.helper_call.body({ ...v, P: v.X, Q: v.Y })}.`,
    args: (r) => [r.int(0, 9), r.int(0, 9)],
    bugs: {
      swapped_args: (v) => ({
        line: 4,
        text: `  return ${v.H}(${v.Y}, ${v.X});`,
        decoy: { line: 1, text: `  return ${TEMPLATES.helper_call.body(v, v.K, v.shape === 2 ? "-" : "+")};` }
      }),
      wrong_arith: (v) => ({
        line: 1,
        text: `  return ${TEMPLATES.helper_call.body(v, v.K, v.shape === 2 ? "-" : "+")};`,
        decoy: { line: 4, text: `  return ${v.H}(${v.Y}, ${v.X});` }
      }),
      wrong_const: (v, r) => ({
        line: 1,
        text: `  return ${TEMPLATES.helper_call.body(v, otherConstant(r, v.K))};`,
        decoy: { line: 4, text: `  return ${v.H}(${v.Y}, ${v.X});` }
      }),
      missing_return: (v) => ({ line: 4, text: `  ${v.H}(${v.X}, ${v.Y});`, decoy: { line: 4, text: `  return ${v.X};` } })
    }
  },
  max_loop: {
    vars: (r) => ({ XS: r.pick(ARRAYS), BEST: r.pick(["best", "top", "res", "m"]), I: r.pick(INDEXES), OP: r.pick([">", "<"]) }),
    lines: (v) => [
      `export function ${v.F}(${v.XS}) {`,
      `  let ${v.BEST} = ${v.XS}[0];`,
      `  for (let ${v.I} = 1; ${v.I} < ${v.XS}.length; ${v.I}++) {`,
      `    if (${v.XS}[${v.I}] ${v.OP} ${v.BEST}) ${v.BEST} = ${v.XS}[${v.I}];`,
      `  }`,
      `  return ${v.BEST};`,
      `}`
    ],
    issue: (v) => `${v.F}(${v.XS}) should return the ${v.OP === ">" ? "largest" : "smallest"} value in ${v.XS}.`,
    args: (r) => [randomList(r, r.int(3, 5))],
    bugs: {
      off_by_one: (v) => ({
        line: 2,
        text: `  for (let ${v.I} = 1; ${v.I} < ${v.XS}.length - 1; ${v.I}++) {`,
        decoy: { line: 2, text: `  for (let ${v.I} = 0; ${v.I} < ${v.XS}.length - 1; ${v.I}++) {` }
      }),
      wrong_cmp: (v) => {
        const op = v.OP === ">" ? "<" : ">"
        return { line: 3, text: `    if (${v.XS}[${v.I}] ${op} ${v.BEST}) ${v.BEST} = ${v.XS}[${v.I}];`, decoy: { line: 1, text: `  let ${v.BEST} = 0;` } }
      },
      missing_return: (v) => ({ line: 5, text: `  ${v.BEST};`, decoy: { line: 5, text: `  return ${v.XS}[0];` } })
    }
  },
  clamp: {
    vars: (r) => {
      const [V, LO, HI] = r.pick([["v", "lo", "hi"], ["x", "min", "max"], ["n", "low", "high"], ["val", "a", "b"]])
      return { V, LO, HI }
    },
    lines: (v) => [
      `export function ${v.F}(${v.V}, ${v.LO}, ${v.HI}) {`,
      `  if (${v.V} < ${v.LO}) return ${v.LO};`,
      `  if (${v.V} > ${v.HI}) return ${v.HI};`,
      `  return ${v.V};`,
      `}`
    ],
    issue: (v) => `${v.F}(${v.V}, ${v.LO}, ${v.HI}) should return ${v.V} limited to the range ${v.LO}..${v.HI}.`,
    args: (r) => [r.int(-5, 15), r.int(0, 3), r.int(6, 10)],
    bugs: {
      wrong_cmp: (v, r) =>
        r.next() < 0.5
          ? { line: 1, text: `  if (${v.V} > ${v.LO}) return ${v.LO};`, decoy: { line: 2, text: `  if (${v.V} < ${v.HI}) return ${v.HI};` } }
          : { line: 2, text: `  if (${v.V} < ${v.HI}) return ${v.HI};`, decoy: { line: 1, text: `  if (${v.V} > ${v.LO}) return ${v.LO};` } },
      swapped_args: (v) => ({ line: 2, text: `  if (${v.V} > ${v.HI}) return ${v.LO};`, decoy: { line: 1, text: `  if (${v.V} < ${v.LO}) return ${v.HI};` } }),
      missing_return: (v) => ({ line: 3, text: `  ${v.V};`, decoy: { line: 3, text: `  return ${v.LO};` } })
    }
  }
}

export const TEMPLATE_NAMES = Object.keys(TEMPLATES)

/** Every template × family pair, with whether it is held out of the train split. */
export const COMBOS = TEMPLATE_NAMES.flatMap((template) =>
  Object.keys(TEMPLATES[template].bugs).map((family) => ({
    template,
    family,
    heldOut: HELD_OUT.some(([t, f]) => t === template && f === family)
  }))
)

/** The visible (and hidden) test file: one `test` per case, named by the call so a failure says which. */
export const renderTestFile = (fn, source, cases) =>
  [
    `import test from "node:test";`,
    `import assert from "node:assert/strict";`,
    `import { ${fn} } from "./${source}";`,
    ``,
    ...cases.map(([call, expected]) => `test(${JSON.stringify(call)}, () => assert.equal(${call}, ${JSON.stringify(expected)}));`),
    ``
  ].join("\n")

const callText = (fn, args) => `${fn}(${args.map((a) => (Array.isArray(a) ? list(a) : String(a))).join(", ")})`

/** Runs a function's source (generation-time checks only: the code is our own and its loops are bounded). */
const evaluate = (lines, fn, args) => {
  try {
    return new Function("__args", `${lines.join("\n").replace(/^export /gm, "")}\nreturn ${fn}(...__args)`)(structuredClone(args))
  } catch (e) {
    return `throws ${e?.name}`
  }
}

const VISIBLE = 2
const HIDDEN = 5

/** One task of a given combination, or undefined when the sampled values do not expose the bug (the caller retries). */
const makeTask = (r, pool, { template, family }) => {
  const t = TEMPLATES[template]
  const v = { ...t.vars(r, pool), F: `${r.pick(pool.verbs)}${r.pick(pool.nouns)}` }
  const bug = t.bugs[family](v, r)
  if (bug.shapes !== undefined && !bug.shapes.includes(v.shape)) return undefined
  const correct = t.lines(v)
  const buggy = correct.map((l, k) => (k === bug.line ? bug.text : l))
  const decoy = buggy.map((l, k) => (k === bug.decoy.line ? bug.decoy.text : l))
  if (bug.text === correct[bug.line] || decoy.join("\n") === buggy.join("\n")) return undefined

  const calls = new Map()
  for (let tries = 0; calls.size < HIDDEN && tries < 50; tries++) {
    const args = t.args(r)
    calls.set(callText(v.F, args), args)
  }
  if (calls.size < HIDDEN) return undefined
  const cases = [...calls].map(([call, args]) => ({ call, args, expected: evaluate(correct, v.F, args) }))
  if (cases.some((c) => typeof c.expected !== "number")) return undefined
  const fails = (lines, c) => evaluate(lines, v.F, c.args) !== c.expected
  const visible = cases.slice(0, VISIBLE)
  // The bug must show in the visible tests, and the decoy must still fail them (its demo says so).
  if (!visible.some((c) => fails(buggy, c)) || !visible.some((c) => fails(decoy, c))) return undefined

  const source = r.pick(SOURCES)
  const testPath = source.replace(/\.mjs$/, ".test.mjs")
  const asCases = (cs) => cs.map((c) => [c.call, c.expected])
  const edit = (from, to) => ({ path: source, old: from.trim(), new: to.trim() })
  const sourceText = `${buggy.join("\n")}\n`
  // A reference edit must be unambiguous for replace_in_file.
  if (sourceText.split(bug.text.trim()).length !== 2 || sourceText.split(buggy[bug.decoy.line].trim()).length !== 2) return undefined
  return {
    input: {
      issue: t.issue(v),
      files: { [source]: sourceText, [testPath]: renderTestFile(v.F, source, asCases(visible)) }
    },
    family,
    template,
    hidden_tests: { fn: v.F, source, cases: asCases(cases.slice(VISIBLE)) },
    fix: edit(bug.text, correct[bug.line]),
    decoy: edit(buggy[bug.decoy.line], bug.decoy.text)
  }
}

/**
 * `n` tasks of a split, deterministic in (split, seed). Families are drawn uniformly, then a
 * template of that family; in the test split a `heldOutFraction` of tasks use a held-out combination.
 */
export const generateTasks = ({ split = "train", n = 100, seed = 1, heldOutFraction = 0.2, pool: poolName = "standard" } = {}) => {
  if (split !== "train" && split !== "test") throw new Error(`split must be train or test, got ${JSON.stringify(split)}`)
  if (poolName !== "standard" && poolName !== "wide") throw new Error(`pool must be standard or wide, got ${JSON.stringify(poolName)}`)
  if (poolName === "wide" && split !== "train") throw new Error("--pool wide is for the train split only (the test split keeps its own pools)")
  const r = makeRandom(seed * 2654435761 + (split === "test" ? 7 : 0))
  const pool = poolName === "wide" ? widePool(seed) : POOLS[split]
  const usable = COMBOS.filter((c) => !c.heldOut)
  const heldOut = COMBOS.filter((c) => c.heldOut)
  const seen = new Set()
  const tasks = []
  while (tasks.length < n) {
    const combo = split === "test" && r.next() < heldOutFraction
      ? r.pick(heldOut)
      : ((family) => r.pick(usable.filter((c) => c.family === family)))(r.pick(FAMILIES))
    // Retry the same combination until the sampled values expose its bug, so retries do not skew the mix.
    let task
    for (let tries = 0; tries < 1000 && (task === undefined || seen.has(JSON.stringify(task.input))); tries++) {
      task = makeTask(r, pool, combo)
    }
    if (task === undefined || seen.has(JSON.stringify(task.input))) throw new Error(`cannot generate a task for ${combo.template}/${combo.family}`)
    seen.add(JSON.stringify(task.input))
    const { input, ...extra } = task
    tasks.push({ id: `mini-swe-${split}-${String(tasks.length).padStart(4, "0")}`, input, split, ...extra, held_out_combo: combo.heldOut })
  }
  return tasks
}

const parseCli = (argv) => {
  const opts = { split: "train", n: 100, seed: 1, heldOutFraction: 0.2, pool: "standard" }
  for (let k = 0; k < argv.length; k += 2) {
    const [flag, value] = [argv[k], argv[k + 1]]
    if (value === undefined) throw new Error(`${flag} needs a value`)
    if (flag === "--split") opts.split = value
    else if (flag === "--n") opts.n = Number(value)
    else if (flag === "--seed") opts.seed = Number(value)
    else if (flag === "--held-out-fraction") opts.heldOutFraction = Number(value)
    else if (flag === "--pool") opts.pool = value
    else throw new Error(`unknown option ${flag} (options: --split train|test, --n N, --seed S, --held-out-fraction F, --pool standard|wide)`)
  }
  if (!Number.isInteger(opts.n) || opts.n < 0) throw new Error("--n must be a non-negative integer")
  if (!Number.isInteger(opts.seed)) throw new Error("--seed must be an integer")
  return opts
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    for (const task of generateTasks(parseCli(process.argv.slice(2)))) process.stdout.write(`${JSON.stringify(task)}\n`)
  } catch (e) {
    process.stderr.write(`tasks.mjs: ${e.message}\n`)
    process.exit(2)
  }
}
