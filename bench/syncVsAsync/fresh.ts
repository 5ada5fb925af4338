/**
 * `--model fresh`: a tiny freshly initialised policy (the default tokenizer and template), for a
 * throughput-only run when no base checkpoint exists. Its rewards are ~always 0, so most updates
 * have nothing to train (zero reward variance) and are skipped.
 */
import { defaultModelConfig, defaultTokenizer, initModelDir } from "@reins/policy"
import { Effect } from "effect"
import { existsSync } from "node:fs"
import path from "node:path"

export const writeFreshPolicy = (dir: string): Promise<void> => {
  if (existsSync(path.join(dir, "config.json"))) return Promise.resolve()
  const tokenizer = defaultTokenizer()
  return Effect.runPromise(
    Effect.asVoid(initModelDir(dir, { tokenizer, config: defaultModelConfig(tokenizer.vocabSize, { dModel: 64, nLayers: 2, nHeads: 4, dFf: 256, contextLength: 256 }) }))
  )
}
