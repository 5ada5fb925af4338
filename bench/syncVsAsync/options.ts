/**
 * The command line of bench/sync-vs-async.ts (see its header for the options) and the scale
 * presets: the default run fits in about ten minutes on 2 cores, `--quick` is a smoke run,
 * `--full` a faithful one.
 */
import { type Mode, modes } from "./records.js"

export const usage =
  "usage: npm run bench -- sync-vs-async [--harness calc|mini-swe] [--model DIR|fresh] [--updates N] [--groups G] [--n N] [--async-groups A] [--max-staleness S] [--tail X] [--tail-unit S] [--nice N] [--reward shaped|exact] [--repeats R] [--eval-tasks K] [--eval-samples S] [--lr X] [--seed N] [--timeout S] [--modes LIST] [--out DIR] [--quick | --full]"

export interface Options {
  readonly harness: "calc" | "mini-swe"
  readonly model: string | undefined
  readonly updates: number
  readonly groups: number
  readonly n: number
  readonly asyncGroups: number
  readonly maxStaleness: number
  readonly tail: number
  /** Seconds a slow task waits per unit of tail: (tail − 1) × this, the same in every mode. */
  readonly tailUnitS: number
  /** Niceness of the harness and verifier processes (0 = the reins process's own priority). */
  readonly nice: number
  /** Training reward: the verifier's 0/1, or partial credit for near answers on top (calc). */
  readonly reward: "shaped" | "exact"
  readonly repeats: number
  readonly evalTasks: number
  readonly evalSamples: number
  readonly lr: number
  readonly seed: number
  readonly timeoutS: number
  readonly modes: ReadonlyArray<Mode>
  readonly scale: "quick" | "default" | "full"
  /** Where the results go (default bench/results/). */
  readonly out: string | undefined
}

/**
 * A rollout's duration with one harness at a time on this machine (median, seconds; measured
 * with the shipped base through `reins serve`, see bench/syncVsAsync/README.md): the default
 * tail unit, so a slow task lasts about `tail` times as long as it would alone.
 */
export const uncontendedRolloutS = { calc: 0.7, "mini-swe": 1 } as const

const niceness = (n: number) => {
  if (n > 19) throw new Error(`--nice expects 0..19, got ${n}\n${usage}`)
  return n
}

export const parseOptions = (args: ReadonlyArray<string>): Options => {
  const given = new Map<string, string>()
  let scale: Options["scale"] = "default"
  for (let i = 0; i < args.length; i++) {
    const flag = args[i]!
    if (flag === "--quick" || flag === "--full") {
      if (scale !== "default") throw new Error(`--quick and --full exclude each other\n${usage}`)
      scale = flag === "--quick" ? "quick" : "full"
      continue
    }
    const known = ["--harness", "--model", "--updates", "--groups", "--n", "--async-groups", "--max-staleness", "--tail", "--tail-unit", "--nice", "--reward", "--repeats", "--eval-tasks", "--eval-samples", "--lr", "--seed", "--timeout", "--modes", "--out"]
    if (!known.includes(flag)) throw new Error(`unknown option ${JSON.stringify(flag)}\n${usage}`)
    const v = args[++i]
    if (v === undefined) throw new Error(`${flag} needs a value\n${usage}`)
    given.set(flag, v)
  }
  const int = (flag: string, fallback: number, min: number) => {
    const raw = given.get(flag)
    if (raw === undefined) return fallback
    const v = Number(raw)
    if (!Number.isInteger(v) || v < min) throw new Error(`${flag} expects an integer >= ${min}, got ${JSON.stringify(raw)}\n${usage}`)
    return v
  }
  const num = (flag: string, fallback: number, min: number, strict = false) => {
    const raw = given.get(flag)
    if (raw === undefined) return fallback
    const v = Number(raw)
    if (!Number.isFinite(v) || v < min || (strict && v === min)) throw new Error(`${flag} expects a number ${strict ? ">" : ">="} ${min}, got ${JSON.stringify(raw)}\n${usage}`)
    return v
  }
  const harness = given.get("--harness") ?? "calc"
  if (harness !== "calc" && harness !== "mini-swe") throw new Error(`--harness expects calc or mini-swe, got ${JSON.stringify(harness)}\n${usage}`)
  const reward = given.get("--reward") ?? (harness === "calc" ? "shaped" : "exact")
  if (reward !== "shaped" && reward !== "exact") throw new Error(`--reward expects shaped or exact, got ${JSON.stringify(reward)}\n${usage}`)
  if (reward === "shaped" && harness !== "calc") throw new Error(`--reward shaped is defined for the calc harness only (partial credit for near answers)\n${usage}`)
  const full = scale === "full", quick = scale === "quick"
  const groups = int("--groups", full ? 4 : 2, 1)
  const asyncGroups = int("--async-groups", 2 * groups, 1)
  if (asyncGroups < groups) throw new Error(`--async-groups (${asyncGroups}) must be >= --groups (${groups}), or no update ever fills\n${usage}`)
  const modeList = (given.get("--modes") ?? modes.join(",")).split(",").map((m) => m.trim())
  for (const m of modeList) if (!(modes as ReadonlyArray<string>).includes(m)) throw new Error(`--modes: unknown mode ${JSON.stringify(m)} (modes: ${modes.join(", ")})\n${usage}`)
  return {
    harness,
    model: given.get("--model"),
    updates: int("--updates", full ? 12 : quick ? 2 : 4, 1),
    groups,
    n: int("--n", full ? 8 : 4, 2),
    asyncGroups,
    maxStaleness: int("--max-staleness", 2, 0),
    tail: num("--tail", 1, 1),
    tailUnitS: num("--tail-unit", uncontendedRolloutS[harness], 0, true),
    nice: niceness(int("--nice", 19, 0)),
    reward,
    repeats: int("--repeats", full ? 3 : quick ? 1 : 2, 1),
    evalTasks: int("--eval-tasks", full ? 40 : quick ? 0 : 8, 0),
    evalSamples: int("--eval-samples", full ? 4 : 2, 1),
    lr: num("--lr", 2e-4, 0, true),
    seed: int("--seed", 1, 0),
    timeoutS: num("--timeout", full ? 1800 : 300, 0, true),
    modes: modes.filter((m) => modeList.includes(m)),
    scale,
    out: given.get("--out")
  }
}

/**
 * The results' file name: a run with another harness or a tail keeps its own files, so calc's
 * natural-spread results (what the simulation validates against by default) stay where they are.
 */
export const resultName = (o: Pick<Options, "harness" | "tail">): string =>
  ["sync-vs-async", ...(o.harness === "calc" ? [] : [o.harness]), ...(o.tail === 1 ? [] : [`tail${o.tail}`])].join("-")
