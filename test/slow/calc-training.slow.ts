/**
 * `npm run test:slow` (not part of `npm test`): the calc training run behind `npm start`, in full,
 * as a real `reins train` process. It asserts that test pass@1 rose above the base policy's by more
 * than the measurement's noise: for the sampled pass@1 (tasks × samples Bernoulli draws), twice the
 * standard error of the difference; for greedy pass@1 (one draw per task), 20 points (issue goal).
 * About 12 minutes on 2 cores.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { exitWithin, workspace } from "../reins/trainFixture.js"

const ws = workspace("slow-calc")
afterAll(ws.cleanup)

describe("calc training", () => {
  it("raises test pass@1 above the base policy's by more than its noise", async () => {
    const run = ws.reins(["start"])
    expect(await exitWithin(run, 40 * 60_000), run.output()).toBe(0)
    const runs = join(ws.dir, "runs")
    expect(existsSync(runs)).toBe(true)
    const s = JSON.parse(readFileSync(join(runs, readdirSync(runs)[0]!, "summary.json"), "utf8"))
    expect(s.harness_errors).toBe(0)
    const samples = JSON.parse(readFileSync(join(runs, readdirSync(runs)[0]!, "config.json"), "utf8")).eval.samples as number
    const draws = s.test_tasks * samples
    const se = Math.sqrt((s.base_pass_at_1 * (1 - s.base_pass_at_1)) / draws + (s.final_pass_at_1 * (1 - s.final_pass_at_1)) / draws)
    expect(s.final_pass_at_1 - s.base_pass_at_1).toBeGreaterThan(2 * se)
    expect(s.final_greedy_pass_at_1 - s.base_greedy_pass_at_1).toBeGreaterThanOrEqual(0.2)
  }, 45 * 60_000)
})
