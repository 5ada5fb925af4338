/**
 * What the end-to-end tests share: an example's run config in temp folders, the local stack for
 * the rest of a test's scope, and every rollout's recorded calls with whether each call's prompt
 * extends the previous call's prompt and output (the exact token chain).
 */
import { HarnessSpec, VerifierSpec } from "@reins/protocol"
import { Context, Effect, Layer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { EvalConfig, Reins, RunConfig } from "reins"

export const example = (name: string) => fileURLToPath(new URL(`../../examples/${name}/reins.config.json`, import.meta.url))

/**
 * The example's run in temp folders. Its processes run at niceness 0 rather than the launcher's
 * default 19: a test shares the machine with other work, and at 19 the harnesses starve into
 * their timeouts (a run's own harnesses and the device compete fairly either way). `harness`
 * replaces fields of the example's harness spec (another command, say).
 */
export const tempRun = (
  run: RunConfig,
  dir: string,
  fields: Partial<ConstructorParameters<typeof RunConfig>[0]> = {},
  harness: Partial<ConstructorParameters<typeof HarnessSpec>[0]> = {}
) =>
  new RunConfig({
    ...run,
    harness: new HarnessSpec({
      ...run.harness,
      nice: 0,
      ...(run.harness.verifier === undefined ? {} : { verifier: new VerifierSpec({ ...run.harness.verifier, nice: 0 }) }),
      ...harness
    }),
    runs_dir: path.join(dir, "runs"),
    data_dir: path.join(dir, "data"),
    concurrency: 8,
    eval: new EvalConfig({ ...run.eval, enabled: false }),
    ...fields
  })

export const tempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(path.join(os.tmpdir(), "reins-e2e-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

/** The stack, alive for the rest of the test's scope. */
export const startReins = (run: RunConfig) => Effect.map(Layer.build(Reins.local({ run })), (context) => Context.get(context, Reins.Reins))

/** Every rollout's calls and attempts, and whether each answered call's prompt extends the one before. */
export const recorded = (reins: Reins.ReinsService) =>
  Effect.gen(function*() {
    const page = yield* reins.stack.store.rollouts({ limit: 1000 })
    return yield* Effect.forEach(page.rollouts, (r) =>
      Effect.map(reins.stack.store.rollout(r.id), (d) => {
        const calls = [...d.calls].sort((a, b) => a.seq - b.seq)
        // A refused call (the context full, say) has no prompt ids: the chain is the answered calls'.
        const answered = calls.filter((c) => c.status === 200)
        const chained = answered.every((c, i) => {
          if (i === 0) return true
          const before = [...answered[i - 1]!.promptIds, ...answered[i - 1]!.outputIds]
          return before.every((t, j) => c.promptIds[j] === t)
        })
        return { rollout: r, attempts: d.attempts, calls, chained }
      }))
  })
