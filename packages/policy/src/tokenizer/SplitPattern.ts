/**
 * The regex of a `Split` pre-tokenizer, translated from the Oniguruma syntax the `tokenizers`
 * library compiles it with into a JavaScript `u`-mode RegExp that matches the same pieces.
 *
 * Only a subset is translated, and everything outside it is refused with its position, because
 * a construct that is accepted but matches differently would split words differently from the
 * model's own tokenizer without any error. The subset covers the patterns of the real families
 * (Qwen2/Qwen3, Llama 3, GPT-4-style): literals, classes, `\p{..}`, `\s`, `\d`, groups,
 * `(?i:..)`, lookahead, and greedy or lazy quantifiers. The translations that differ from a
 * verbatim copy:
 *
 * - `\s` / `\S` are Oniguruma's Unicode White_Space, so `\p{White_Space}`: JavaScript's `\s` also
 *   matches U+FEFF and misses U+0085. `\d` is `\p{Nd}`.
 * - `(?i:..)` folds ASCII letters (`'s` → `'[sS]`), as `@huggingface/tokenizers` does; a cased
 *   non-ASCII letter or a `\p{..}` inside it is refused. (Oniguruma's full Unicode folding also
 *   lets `s` match U+017F and `k` match U+212A; neither the reference nor we do that.)
 * - `X{n,m}+` is a repetition of `X{n,m}` (Oniguruma syntax, not Java's possessive).
 *
 * Refused: possessive quantifiers and atomic groups (JavaScript has neither), lookbehind,
 * anchors (`^ $ \A \z \Z \b \B \G`), back-references, `\w`/`\h`, POSIX brackets, nested classes
 * and class intersections, inline option switches other than `(?i:`.
 */
import { TokenizerError } from "./TokenizerError.js"

const SYNTAX = new Set("^$\\.*+?()[]{}|/")
const CLASS_SYNTAX = new Set("^$\\.*+?()[]{}|/-")
const NAMED_CONTROLS: Record<number, string> = { 0x09: "\\t", 0x0a: "\\n", 0x0d: "\\r" }

/**
 * An escape or class member: one code point, or a set written as a class fragment (`\p{..}`),
 * `caseless` when case folding cannot change it (White_Space, Nd).
 */
type Item = { readonly cp: number } | { readonly set: string; readonly caseless: boolean }

class Unsupported extends Error {
  constructor(
    readonly what: string,
    readonly at: number
  ) {
    super(what)
  }
}

/** `c` as JavaScript pattern source, escaped for inside (`inClass`) or outside a class. */
const literal = (cp: number, inClass: boolean): string => {
  const c = String.fromCodePoint(cp)
  if ((inClass ? CLASS_SYNTAX : SYNTAX).has(c)) return `\\${c}`
  const named = NAMED_CONTROLS[cp]
  if (named !== undefined) return named
  // Anything else outside printable ASCII is written as a code-point escape: unambiguous in u-mode.
  return cp >= 0x20 && cp < 0x7f ? c : `\\u{${cp.toString(16)}}`
}

const isAsciiLetter = (cp: number) => (cp >= 0x41 && cp <= 0x5a) || (cp >= 0x61 && cp <= 0x7a)
const isCased = (cp: number) => {
  const c = String.fromCodePoint(cp)
  return c.toLowerCase() !== c || c.toUpperCase() !== c
}
const otherCase = (cp: number) => (cp >= 0x61 ? cp - 0x20 : cp + 0x20)

class Translator {
  private i = 0
  private fold = false

  constructor(private readonly src: string) {}

  translate(): string {
    const out = this.alternation()
    if (this.i < this.src.length) throw new Unsupported(`unbalanced ")"`, this.i)
    return out
  }

  private peek(k = 0): string | undefined {
    return this.src[this.i + k]
  }

  private alternation(): string {
    let out = this.sequence()
    while (this.peek() === "|") {
      this.i++
      out += "|" + this.sequence()
    }
    return out
  }

  private sequence(): string {
    let out = ""
    while (this.i < this.src.length && this.peek() !== "|" && this.peek() !== ")") out += this.quantified()
    return out
  }

  private quantified(): string {
    const { source, quantifiable } = this.atom()
    let out = source
    let quantified = false
    for (;;) {
      const at = this.i
      const c = this.peek()
      let q: string | undefined
      if (c === "?" || c === "*" || c === "+") {
        q = c
        this.i++
      } else if (c === "{") {
        const m = /^\{(\d*)(?:(,)(\d*))?\}/.exec(this.src.slice(this.i))
        if (m === null || (m[1] === "" && (m[2] === undefined || m[3] === ""))) break // a literal "{"
        q = `{${m[1] === "" ? "0" : m[1]}${m[2] ?? ""}${m[3] ?? ""}}`
        this.i += m[0].length
      } else {
        break
      }
      if (!quantifiable) throw new Unsupported("a quantifier on a lookahead or an empty atom", at)
      const next = this.peek()
      if (next === "?") {
        q += "?"
        this.i++
      } else if (next === "+" && !q.startsWith("{")) {
        throw new Unsupported(`possessive quantifier "${q}+"`, at)
      }
      // A repeated repetition (`X{1,3}+`) needs a group around the inner one in JavaScript.
      out = (quantified ? `(?:${out})` : out) + q
      quantified = true
    }
    return out
  }

  private atom(): { source: string; quantifiable: boolean } {
    const at = this.i
    const c = this.src.codePointAt(this.i)!
    const ch = String.fromCodePoint(c)
    switch (ch) {
      case "(":
        return this.group()
      case "[":
        return { source: this.charClass(), quantifiable: true }
      case "\\": {
        const item = this.escape()
        return { source: this.itemSource(item, at), quantifiable: true }
      }
      case ".":
        this.i++
        // Oniguruma's "." is any character but a newline.
        return { source: "[^\\n]", quantifiable: true }
      case "^":
      case "$":
        throw new Unsupported(`anchor "${ch}"`, at)
      case "*":
      case "+":
      case "?":
        throw new Unsupported(`quantifier "${ch}" with nothing to repeat`, at)
      default:
        this.i += ch.length
        return { source: this.itemSource({ cp: c }, at), quantifiable: true }
    }
  }

  /** One escape or literal as a stand-alone atom, folded when inside `(?i:..)`. */
  private itemSource(item: Item, at: number): string {
    if ("set" in item) {
      if (this.fold && !item.caseless) throw new Unsupported("a \\p{..} class inside (?i:..)", at)
      return item.set
    }
    if (this.fold && isAsciiLetter(item.cp)) return `[${literal(item.cp, true)}${literal(otherCase(item.cp), true)}]`
    if (this.fold && isCased(item.cp)) throw new Unsupported(`the non-ASCII letter ${JSON.stringify(String.fromCodePoint(item.cp))} inside (?i:..)`, at)
    return literal(item.cp, false)
  }

  private group(): { source: string; quantifiable: boolean } {
    const at = this.i
    const rest = this.src.slice(this.i)
    const prefix = /^\((?:\?(?:[:=!>#]|<[=!]|<[A-Za-z_]\w*>|-?i:|[imx-]+\)?))?/.exec(rest)![0]
    let open: string
    let quantifiable = true
    const fold = this.fold
    if (prefix === "(" || prefix === "(?:" || /^\(\?<\w+>$/.test(prefix)) {
      // Captures do not matter to Split (it uses whole matches); non-capturing is the same match.
      open = "(?:"
    } else if (prefix === "(?i:" || prefix === "(?-i:") {
      open = "(?:"
      this.fold = prefix === "(?i:"
    } else if (prefix === "(?=" || prefix === "(?!") {
      open = prefix
      quantifiable = false
    } else if (prefix === "(?<=" || prefix === "(?<!") {
      throw new Unsupported(`lookbehind "${prefix}"`, at)
    } else if (prefix === "(?>") {
      throw new Unsupported('atomic group "(?>"', at)
    } else {
      throw new Unsupported(`group "${prefix}"`, at)
    }
    this.i += prefix.length
    const inner = this.alternation()
    if (this.peek() !== ")") throw new Unsupported("unterminated group", at)
    this.i++
    this.fold = fold
    return { source: `${open}${inner})`, quantifiable }
  }

  private charClass(): string {
    const at = this.i
    this.i++ // "["
    let negated = false
    if (this.peek() === "^") {
      negated = true
      this.i++
    }
    const parts: Array<string> = []
    let first = true
    for (;;) {
      const here = this.i
      const c = this.peek()
      if (c === undefined) throw new Unsupported("unterminated character class", at)
      if (c === "]" && !first) {
        this.i++
        break
      }
      first = false
      if (c === "[") throw new Unsupported(this.src.startsWith("[:", here) ? "POSIX bracket class" : "nested character class", here)
      if (c === "&" && this.peek(1) === "&") throw new Unsupported('class intersection "&&"', here)
      const lo = this.classItem()
      if (this.peek() === "-" && this.peek(1) !== "]" && this.peek(1) !== undefined) {
        const dash = this.i
        this.i++
        const hi = this.classItem()
        if (!("cp" in lo) || !("cp" in hi)) throw new Unsupported("a range with a class as an end", dash)
        if (hi.cp < lo.cp) throw new Unsupported("a range out of order", dash)
        parts.push(`${literal(lo.cp, true)}-${literal(hi.cp, true)}`)
        if (this.fold) parts.push(...this.foldRange(lo.cp, hi.cp, dash))
        continue
      }
      if ("set" in lo) {
        if (this.fold && !lo.caseless) throw new Unsupported("a \\p{..} class inside (?i:..)", here)
        parts.push(lo.set)
      } else {
        parts.push(literal(lo.cp, true))
        if (this.fold) parts.push(...this.foldRange(lo.cp, lo.cp, here))
      }
    }
    return `[${negated ? "^" : ""}${parts.join("")}]`
  }

  /** The other ASCII case of a range's letters (for `(?i:..)`); cased non-ASCII is refused. */
  private foldRange(lo: number, hi: number, at: number): Array<string> {
    const out: Array<string> = []
    for (const [a, z] of [[0x41, 0x5a], [0x61, 0x7a]] as const) {
      const l = Math.max(lo, a)
      const h = Math.min(hi, z)
      if (l <= h) out.push(`${literal(otherCase(l), true)}-${literal(otherCase(h), true)}`)
    }
    for (let cp = Math.max(lo, 0x80); cp <= hi; cp++) {
      if (isCased(cp)) throw new Unsupported(`the non-ASCII letter ${JSON.stringify(String.fromCodePoint(cp))} inside (?i:..)`, at)
    }
    return out
  }

  private classItem(): Item {
    if (this.peek() === "\\") return this.escape()
    const cp = this.src.codePointAt(this.i)!
    this.i += cp > 0xffff ? 2 : 1
    return { cp }
  }

  /** An escape at `\`: a code point or a set. */
  private escape(): Item {
    const at = this.i
    this.i++ // "\"
    const c = this.peek()
    if (c === undefined) throw new Unsupported("a trailing backslash", at)
    const rest = this.src.slice(this.i)
    const prop = /^([pP])\{(\^?)([A-Za-z_]+(?:=[A-Za-z_]+)?)\}/.exec(rest)
    if (prop !== null) {
      this.i += prop[0].length
      const negated = (prop[1] === "P") !== (prop[2] === "^")
      return { set: `\\${negated ? "P" : "p"}{${propertyName(prop[3]!, at)}}`, caseless: false }
    }
    const hex = /^(?:x\{([0-9A-Fa-f]{1,6})\}|x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4}))/.exec(rest)
    if (hex !== null) {
      this.i += hex[0].length
      const cp = parseInt(hex[1] ?? hex[2] ?? hex[3]!, 16)
      if (cp > 0x10ffff) throw new Unsupported("a code point above U+10FFFF", at)
      return { cp }
    }
    const cp = this.src.codePointAt(this.i)!
    this.i += cp > 0xffff ? 2 : 1
    const simple: Record<string, number> = { n: 0x0a, r: 0x0d, t: 0x09, f: 0x0c, v: 0x0b, a: 0x07, e: 0x1b }
    if (simple[c] !== undefined) return { cp: simple[c]! }
    const sets: Record<string, string> = { s: "\\p{White_Space}", S: "\\P{White_Space}", d: "\\p{Nd}", D: "\\P{Nd}" }
    if (sets[c] !== undefined) return { set: sets[c]!, caseless: true }
    if (/[A-Za-z0-9]/.test(c)) throw new Unsupported(`escape "\\${c}"`, at)
    return { cp }
  }
}

/** An Oniguruma property name as JavaScript spells it (scripts need `Script=` there). */
const propertyName = (name: string, at: number): string => {
  for (const candidate of [name, `Script=${name}`]) {
    try {
      new RegExp(`\\p{${candidate}}`, "u")
      return candidate
    } catch {
      // try the next spelling
    }
  }
  throw new Unsupported(`unknown property \\p{${name}}`, at)
}

/**
 * Compiles a Split pattern (`{ Regex }` in Oniguruma syntax, or a literal `{ String }`) to a
 * global `u`-mode RegExp. `field` names the JSON field for the error message.
 */
export const compileSplitPattern = (pattern: { readonly Regex: string } | { readonly String: string }, field: string): RegExp => {
  if ("String" in pattern) {
    if (pattern.String.length === 0) throw new TokenizerError({ message: `tokenizer.json: ${field}.String is empty` })
    return new RegExp([...pattern.String].map((c) => literal(c.codePointAt(0)!, false)).join(""), "gu")
  }
  const src = pattern.Regex
  let translated: string
  try {
    translated = new Translator(src).translate()
  } catch (e) {
    if (!(e instanceof Unsupported)) throw e
    throw new TokenizerError({ message: `tokenizer.json: ${field}.Regex ${JSON.stringify(src)}: ${e.what} at index ${e.at} is not supported` })
  }
  try {
    return new RegExp(translated, "gu")
  } catch (e) {
    throw new TokenizerError({ message: `tokenizer.json: ${field}.Regex ${JSON.stringify(src)} does not compile (${(e as Error).message})`, cause: e })
  }
}
