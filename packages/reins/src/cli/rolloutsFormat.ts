/** How `reins rollouts` prints: the list as a table, a rollout as sections, its tokens in ANSI colours. */
import type { RolloutDetail, RolloutRow, TokenSegment } from "./rolloutsApi.js"

export const table = (rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)))
  return rows.map((r) => r.map((cell, i) => cell.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")
}

const versions = (v: { readonly min: number | null; readonly max: number | null }) =>
  v.min === null ? "-" : v.min === v.max ? String(v.min) : `${v.min}-${v.max}`

const reward = (r: number | null) => (r === null ? "-" : String(Math.round(r * 1000) / 1000))

const seconds = (ms: number | null) => (ms === null ? "-" : `${(ms / 1000).toFixed(1)}s`)

const task = (t: unknown) => {
  const text = typeof t === "string" ? t : JSON.stringify(t)
  return text.length > 40 ? text.slice(0, 39) + "…" : text
}

export const listTable = (rows: ReadonlyArray<RolloutRow>): string =>
  table([
    ["ID", "STATE", "GROUP", "REWARD", "ATTEMPTS", "CALLS", "TOKENS", "VERSIONS", "DURATION", "TASK"],
    ...rows.map((r) => [r.id, r.state, r.group ?? "-", reward(r.reward), String(r.attempts), String(r.calls), String(r.output_tokens), versions(r.versions), seconds(r.duration_ms), task(r.task)])
  ])

export const detailText = (d: RolloutDetail): string => {
  const lines = [`rollout ${d.id}  ${d.state}  group ${d.group ?? "-"}  reward ${reward(d.reward)}`, `task ${JSON.stringify(d.task)}`, "", "attempts:"]
  for (const a of d.attempts) lines.push(`  #${a.index} ${a.id}  ${a.state}${a.reason ? `  (${a.reason})` : ""}`)
  lines.push("", "calls:")
  lines.push(
    table([
      ["  SEQ", "ATTEMPT", "ENDPOINT", "STATUS", "PROMPT", "OUTPUT", "FINISH", "REUSED", "BREAK"],
      ...d.calls.map((c) => [
        `  ${c.seq}`,
        String(d.attempts.find((a) => a.id === c.attempt_id)?.index ?? "?"),
        c.endpoint,
        c.status === 200 ? "200" : `${c.status} ${c.error ?? ""}`.trim(),
        String(c.prompt_token_ids.length),
        String(c.output_token_ids.length),
        c.finish_reason ?? "-",
        String(c.reuse.reused_tokens),
        c.reuse.break ?? "-"
      ])
    ])
  )
  if (d.rewards.length > 0) lines.push("", `rewards: ${d.rewards.map((r) => (r.call_id === null ? reward(r.reward) : `${reward(r.reward)} (call ${r.call_id})`)).join(", ")}`)
  return lines.join("\n")
}

const ESC = "\u001b["
const paint = (codes: string, text: string, color: boolean) => (color ? `${ESC}${codes}m${text}${ESC}0m` : text)

/** Action tokens get a background from green (the policy was sure) through yellow to red (surprised). */
const heat = (logprob: number | null) => (logprob === null ? "42;30" : logprob > -0.5 ? "42;30" : logprob > -2 ? "43;30" : "41;97")

/**
 * A token as terminal text: tabs and other control characters as their visible pictures (a
 * sampled control byte must not drive the terminal), newlines as `↵` that then break the line.
 */
const cell = (t: string, paintIt: (text: string) => string) =>
  t
    .split("\n")
    .map((part) => paintIt(part.replace(/[\u0000-\u001f\u007f]/g, (c) => (c === "\t" ? "→" : String.fromCharCode(c === "\u007f" ? 0x2421 : 0x2400 + c.charCodeAt(0))))))
    .join(paintIt("↵") + "\n")

const number = (x: number) => (Math.abs(x) >= 0.01 || x === 0 ? x.toFixed(3) : x.toExponential(2))

const trainedText = (t: TokenSegment["calls"][number]["trained"]) =>
  t === null ? "not trained" : `trained into version ${t.version}, advantage ${number(t.advantage)}, loss weight ${number(t.loss_weight)} on ${t.tokens} tokens`

export const tokenText = (segments: ReadonlyArray<TokenSegment>, color: boolean): string => {
  const out: Array<string> = []
  for (const s of segments) {
    const vs = s.versions.filter((v): v is number => v !== null)
    const span = versions(vs.length === 0 ? { min: null, max: null } : { min: Math.min(...vs), max: Math.max(...vs) })
    out.push(paint("1", `── segment ${s.index} (attempt ${s.attempt_id}) start: ${s.start}, ${s.tokens} tokens, ${s.action_tokens} actions, versions ${span}`, color))
    for (const c of s.calls) out.push(`   call #${c.seq}, tokens ${c.start}-${c.end}: ${trainedText(c.trained)}`)
    let line = ""
    for (let i = 0; i < s.tokens; i++) {
      const text = s.text === null ? `[${s.token_ids[i]}]` : s.text[i]!
      const role = s.roles[i]!
      const codes = role === "prompt" ? "2" : role === "observation" ? "36" : heat(s.logprobs[i]!)
      line += cell(text, (t) => paint(codes, t, color))
    }
    out.push(line, "")
  }
  out.push(
    color
      ? `legend: ${paint("2", "prompt", true)} ${paint("36", "observation", true)} action: ${paint("42;30", "logprob > -0.5", true)} ${paint("43;30", "> -2", true)} ${paint("41;97", "<= -2", true)}`
      : "legend: prompt, observation and action tokens are coloured when the output is a terminal"
  )
  return out.join("\n")
}
