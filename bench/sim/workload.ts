/**
 * Draws rollouts from a profile. A rollout is a start-up delay, then turns: each turn is a model
 * call generating `tokens` on a device followed by `tool_s` of harness time off the device.
 *
 * Rollouts of one group run the same task, so their turns and tool times are correlated
 * (`task_correlation`): each draw mixes a per-task normal with a per-rollout one. The `tail`
 * knob stretches everything above the median by `tail` (x → m + tail·(x − m)) for turns and
 * tool time: a longer tail means some tasks run slower tests or take more steps, while the
 * typical rollout (and anything below the median) stays as measured.
 */
import type { Dist, WorkloadProfile } from "./profile.js"
import { makeNormal, makeRng, normalCdf } from "./prng.js"

export interface Turn {
  readonly tokens: number
  readonly tool_s: number
}

export interface RolloutSpec {
  readonly launch_s: number
  readonly turns: ReadonlyArray<Turn>
  readonly train_tokens: number
}

/** A distribution ready to draw from: `draw(z)` maps a standard normal to a value. */
interface Drawer {
  readonly median: number
  readonly draw: (z: number) => number
}

const drawer = (d: Dist): Drawer => {
  switch (d.kind) {
    case "constant":
      return { median: d.value, draw: () => d.value }
    case "lognormal": {
      const lo = d.min ?? 0, hi = d.max ?? Infinity
      return { median: d.median, draw: (z) => Math.min(hi, Math.max(lo, d.median * Math.exp(d.sigma * z))) }
    }
    case "samples": {
      // Quantile mapping keeps the empirical shape and still lets draws be correlated.
      const s = [...d.values].sort((a, b) => a - b)
      const at = (u: number) => s[Math.min(s.length - 1, Math.floor(u * s.length))]!
      return { median: at(0.5), draw: (z) => at(normalCdf(z)) }
    }
  }
}

const stretch = (x: number, median: number, tail: number): number => (x > median ? median + tail * (x - median) : x)

export class WorkloadSampler {
  private readonly normal: () => number
  private readonly launch: Drawer
  private readonly turns: Drawer
  private readonly tokens: Drawer
  private readonly tool: Drawer
  private readonly shared: number
  private readonly own: number

  constructor(private readonly profile: WorkloadProfile, private readonly tail: number, seed: number) {
    if (!(tail >= 1)) throw new RangeError(`tail must be >= 1 (it multiplies the spread above the median), got ${tail}`)
    this.normal = makeNormal(makeRng(seed))
    const r = profile.rollout
    this.launch = drawer(r.launch_s)
    this.turns = drawer(r.turns)
    this.tokens = drawer(r.tokens_per_call)
    this.tool = drawer(r.tool_s)
    this.shared = Math.sqrt(r.task_correlation)
    this.own = Math.sqrt(1 - r.task_correlation)
  }

  /** The `n` rollouts of one group (one task). */
  group(n: number): Array<RolloutSpec> {
    const taskTurns = this.normal(), taskTool = this.normal()
    return Array.from({ length: n }, () => this.rollout(taskTurns, taskTool))
  }

  private rollout(taskTurns: number, taskTool: number): RolloutSpec {
    const mix = (task: number) => this.shared * task + this.own * this.normal()
    const count = Math.max(1, Math.round(stretch(this.turns.draw(mix(taskTurns)), this.turns.median, this.tail)))
    const turns: Array<Turn> = []
    let generated = 0
    for (let i = 0; i < count; i++) {
      const tokens = Math.max(1, Math.round(this.tokens.draw(this.normal())))
      const tool_s = Math.max(0, stretch(this.tool.draw(mix(taskTool)), this.tool.median, this.tail))
      generated += tokens
      turns.push({ tokens, tool_s })
    }
    return {
      launch_s: Math.max(0, this.launch.draw(this.normal())),
      turns,
      train_tokens: generated * this.profile.rollout.train_tokens_per_generated
    }
  }
}
