/**
 * The anchor: llama.cpp (through node-llama-cpp, its prebuilt CPU binary from npm; nothing is
 * built or downloaded at run time) on the same weights, written as an F32 GGUF file. CPU only
 * (`gpu: false`); one context per thread count, one sequence, sampled greedily over token ids.
 *
 *   load      `loadModel` (mmap of the file, page cache warm after writing it)
 *   prefill   the prompt's evaluation, tokens/s
 *   decode    tokens/s of the generated tokens after the first
 */
import { getLlama, LlamaLogLevel } from "node-llama-cpp"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

export interface LlamaCppRun {
  readonly threads: number
  readonly prefillTokPerS: number
  readonly decodeTokPerS: number
}

export interface LlamaCppResult {
  /** node-llama-cpp's version and the llama.cpp release its binaries were built from. */
  readonly version: string
  readonly llamaCppRelease: string
  readonly loadS: number
  readonly runs: ReadonlyArray<LlamaCppRun>
}

const packageRoot = fileURLToPath(new URL("../", import.meta.resolve("node-llama-cpp")))
const readJson = (file: string) => JSON.parse(readFileSync(packageRoot + file, "utf8")) as Record<string, string>

/** Decodes `newTokens` after a `prompt`-token prompt at each thread count; best of `reps`. */
export const llamaCppDecode = async (
  file: string,
  options: { readonly threads: ReadonlyArray<number>; readonly prompt: number; readonly newTokens: number; readonly context: number; readonly vocab: number; readonly reps: number }
): Promise<LlamaCppResult> => {
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false })
  try {
    const t = performance.now()
    const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 })
    const loadS = (performance.now() - t) / 1000
    const runs: Array<LlamaCppRun> = []
    try {
      for (const threads of options.threads) {
        const context = await model.createContext({ contextSize: options.context, batchSize: 512, sequences: 1, threads: { ideal: threads, min: threads } })
        try {
          let best: LlamaCppRun = { threads, prefillTokPerS: 0, decodeTokPerS: 0 }
          for (let r = 0; r < options.reps + 1; r++) {
            const sequence = context.getSequence()
            const prompt = Array.from({ length: options.prompt }, (_, i) => (r * 7919 + i * 104729) % options.vocab)
            const start = performance.now()
            let first = 0
            let n = 0
            for await (const _token of sequence.evaluate(prompt as Parameters<typeof sequence.evaluate>[0], { temperature: 0 })) {
              if (n === 0) first = performance.now()
              if (++n >= options.newTokens) break
            }
            const end = performance.now()
            sequence.dispose()
            if (r === 0) continue // warm-up
            best = {
              threads,
              prefillTokPerS: Math.max(best.prefillTokPerS, options.prompt / ((first - start) / 1000)),
              decodeTokPerS: Math.max(best.decodeTokPerS, (n - 1) / ((end - first) / 1000))
            }
          }
          runs.push(best)
        } finally {
          await context.dispose()
        }
      }
    } finally {
      await model.dispose()
    }
    return { version: readJson("package.json")["version"]!, llamaCppRelease: readJson("llama/binariesGithubRelease.json")["release"]!, loadS, runs }
  } finally {
    await llama.dispose()
  }
}
