/**
 * The `calculate` tool's evaluator: a tiny recursive-descent parser for integers and decimals
 * with + - * / and parentheses (and unary minus). No `eval`: the expression comes from a model,
 * i.e. it is untrusted text. Every malformed input is a `CalcError` with a short message the
 * model can read in its tool result.
 *
 *   expr   := term (("+" | "-") term)*
 *   term   := factor (("*" | "/") factor)*
 *   factor := ("-" | "+") factor | "(" expr ")" | number
 */

export class CalcError extends Error {
  name = "CalcError"
}

/** Bounds so that hostile input cannot cost much (or overflow the stack through nesting). */
const MAX_LENGTH = 200
const MAX_DEPTH = 32

/** @param {string} text @returns {number} */
export const evaluate = (text) => {
  if (typeof text !== "string") throw new CalcError("expression must be a string")
  if (text.length > MAX_LENGTH) throw new CalcError(`expression longer than ${MAX_LENGTH} characters`)
  if (text.trim() === "") throw new CalcError("empty expression")
  let at = 0
  let depth = 0

  // Whitespace separates tokens but never joins them ("1 2" is an error, not 12).
  const peek = () => {
    while (/\s/.test(text[at] ?? "")) at++
    return text[at]
  }

  const unexpected = () =>
    new CalcError(at < text.length ? `unexpected "${text[at]}" at position ${at + 1}` : "unexpected end of expression")

  const number = () => {
    peek()
    const m = /^\d+(\.\d+)?/.exec(text.slice(at))
    if (m === null) throw unexpected()
    at += m[0].length
    return Number(m[0])
  }

  const factor = () => {
    const c = peek()
    if (c === "-" || c === "+") {
      const sign = text[at++] === "-" ? -1 : 1
      return nested(() => sign * factor())
    }
    if (c === "(") {
      at++
      const value = nested(expr)
      if (peek() !== ")") throw at < text.length ? unexpected() : new CalcError('missing ")"')
      at++
      return value
    }
    return number()
  }

  const nested = (f) => {
    if (++depth > MAX_DEPTH) throw new CalcError("expression nested too deeply")
    const value = f()
    depth--
    return value
  }

  const term = () => {
    let value = factor()
    while (peek() === "*" || peek() === "/") {
      const op = text[at++]
      const right = factor()
      if (op === "/" && right === 0) throw new CalcError("division by zero")
      value = op === "*" ? value * right : value / right
    }
    return value
  }

  const expr = () => {
    let value = term()
    while (peek() === "+" || peek() === "-") {
      const op = text[at++]
      const right = term()
      value = op === "+" ? value + right : value - right
    }
    return value
  }

  const value = expr()
  if (peek() !== undefined) throw unexpected()
  if (!Number.isFinite(value)) throw new CalcError("result is not a finite number")
  return value
}

/** A number as the tool shows it: integers exactly, others rounded to 6 decimals (no "0.30000000000000004"). */
export const formatNumber = (value) => {
  const rounded = Math.round(value * 1e6) / 1e6
  return String(Object.is(rounded, -0) ? 0 : rounded)
}

/** The tool's text result: the value, or `error: ...` (never throws). */
export const calculate = (expression) => {
  try {
    return formatNumber(evaluate(expression))
  } catch (e) {
    return `error: ${e instanceof CalcError ? e.message : String(e)}`
  }
}
