/**
 * Drawing tokens on the device (webgpuDecode.ts): a GPU decoder that read back every row of
 * logits would move vocab × 4 bytes per sequence per step (0.6 MB for Qwen3's 152k vocabulary),
 * and the Sampler would then spend milliseconds per row in JavaScript. For a request without
 * top-k, top-p or top logprobs the draw is simple enough to make where the logits are, and only
 * four numbers per sequence come back.
 *
 * The draw is the Sampler's (engine/sampler.ts), with the same uniform from the request's RNG:
 * temperature 0 is the argmax with its logprob at τ = 1; otherwise the first token at which the
 * cumulative softmax(z/τ) reaches u, with its logprob log softmax(z/τ). Sums are float32 on the
 * device and float64 in the Sampler, so a u within ~1e-7 of a boundary may pick the neighbouring
 * token; the logprob is always that of the token drawn.
 */

/** A draw the engine lets a decoder make on its device: a temperature and the request's uniform. */
export interface Pick {
  readonly temperature: number
  readonly u: number
}

/** One chunk's result: its last token's logits, or the token drawn on the device and its logprob. */
export type StepRow = Float32Array | { readonly id: number; readonly logprob: number }
export type StepRows = ReadonlyArray<StepRow>

/**
 * Row `j` of a device's draws, read back — [P, 4] floats: drawn id, its logprob under τ, argmax
 * id, its logprob under τ (τ taken as 1 for a greedy pick, as the Sampler reports it) — as the
 * token the pick asked for. A device that computed nothing (a failed shader computes nothing and
 * says nothing) fails the step here rather than emitting a token that is not one.
 */
export const readDraw = (values: Float32Array, j: number, pick: Pick, vocab: number): StepRow => {
  const at = j * 4 + (pick.temperature > 0 ? 0 : 2)
  const id = values[at]!
  const logprob = values[at + 1]!
  if (!(Number.isInteger(id) && id >= 0 && id < vocab && logprob <= 1e-3)) {
    throw new RangeError(`the device drew no valid token (id ${id}, logprob ${logprob}, vocabulary ${vocab})`)
  }
  return { id, logprob: Math.min(logprob, 0) }
}
