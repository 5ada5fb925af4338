// The token view: every token of every segment, coloured by role (prompt, observation, trained
// action), actions shaded by how likely the policy found them (green sure → red surprised), each
// with its id, logprob, policy version and (once trained) advantage and loss weight on hover;
// segment boundaries with their break reason; what each update trained of each call.
import { html } from "../lib.js"

const heat = (logprob) => {
  const p = Math.exp(logprob)
  return `hsl(${Math.round(120 * p)} 70% 80%)`
}

const Token = ({ s, i }) => {
  const role = s.roles[i]
  const text = s.text === null ? `⟨${s.token_ids[i]}⟩` : s.text[i]
  const lp = s.logprobs[i]
  const v = s.versions[i]
  const a = s.advantages[i]
  const w = s.loss_weights[i]
  const title = `#${i} id ${s.token_ids[i]} · ${role}${lp === null ? "" : ` · logprob ${lp.toFixed(3)}`}${v === null ? "" : ` · version ${v}`}` +
    (a === null ? (role === "action" ? " · not trained" : "") : ` · advantage ${number(a)} · loss weight ${number(w)}`)
  return html`<span class=${`tok ${role}`} data-role=${role} data-version=${v ?? ""} data-advantage=${a ?? ""} data-weight=${w ?? ""} style=${role === "action" ? `background:${heat(lp)}` : ""} title=${title}>${text}</span>`
}

const number = (x) => (Math.abs(x) >= 0.01 || x === 0 ? x.toFixed(3) : x.toExponential(2))

const trainedText = (c) =>
  c.trained === null
    ? " · not trained"
    : ` · trained into version ${c.trained.version}: advantage ${number(c.trained.advantage)}, loss weight ${number(c.trained.loss_weight)} on ${c.trained.tokens} tokens`

const versions = (s) => {
  const vs = s.versions.filter((v) => v !== null)
  if (vs.length === 0) return "–"
  const lo = Math.min(...vs)
  const hi = Math.max(...vs)
  return lo === hi ? String(lo) : `${lo}–${hi}`
}

const Segment = ({ s }) => html`<section class="segment" data-index=${s.index} data-start=${s.start} data-tokens=${s.tokens}>
  <header>
    <strong>Segment ${s.index}</strong> · attempt <span class="mono">${s.attempt_id}</span> ·
    starts: <span class=${`break ${s.start}`}>${s.start}</span> · ${s.tokens} tokens, ${s.action_tokens} trained · versions ${versions(s)}
  </header>
  <ul class="spans">
    ${s.calls.map(
      (c) => html`<li data-trained=${c.trained === null ? "" : c.trained.version}>call #${c.seq}: response tokens ${c.start}–${c.end} (${c.finish_reason ?? "?"})${c.reused_tokens > 0 ? html`, reused ${c.reused_tokens} prompt tokens of <span class="mono">${c.reused_from}</span>` : ""}<span class="weights">${trainedText(c)}</span></li>`
    )}
  </ul>
  <div class="tokens">${s.token_ids.map((_, i) => html`<${Token} s=${s} i=${i} />`)}</div>
</section>`

export const TokenView = ({ view }) => html`<div class="token-view" data-segments=${view.segments.length}>
  <p class="legend">
    <span class="tok prompt">prompt</span> <span class="tok observation">observation</span>
    <span class="tok action" style=${`background:${heat(-0.05)}`}>action, likely</span>
    <span class="tok action" style=${`background:${heat(-1)}`}>action, logprob −1</span>
    <span class="tok action" style=${`background:${heat(-4)}`}>action, surprising</span>
    ${view.has_text ? "" : " · this Gateway has no tokenizer (upstream backend): ids only"}
  </p>
  ${view.segments.length === 0 ? html`<p class="empty">No trainable calls, so no segments.</p>` : view.segments.map((s) => html`<${Segment} s=${s} key=${s.index} />`)}
</div>`
