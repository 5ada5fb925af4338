/**
 * What every calc harness (chat, Messages, Agents SDK) reads the same way: the task from
 * REINS_TASK or the first argument, the CALC_* settings, the verbose log, and how it fails (exit 2
 * on a bad task or setting, 1 when the server fails), each message prefixed with the harness's name.
 */

/** The harness's I/O; `name` starts every message it writes to stderr. */
export const harnessIO = (name) => {
  const fail = (code, message) => {
    process.stderr.write(`${name}: ${message}\n`)
    process.exit(code)
  }

  const numberSetting = (key, fallback, integer = false) => {
    const raw = process.env[key]
    if (raw === undefined || raw.trim() === "") return fallback
    const value = Number(raw)
    const kind = integer ? "integer" : "number"
    if (!Number.isFinite(value) || value < 0 || (integer && !Number.isInteger(value))) {
      fail(2, `${key} must be a non-negative ${kind}, got ${JSON.stringify(raw)}`)
    }
    return value
  }

  /** The question from REINS_TASK (JSON) or argv[2] (JSON or plain text). */
  const readQuestion = () => {
    const raw = process.env.REINS_TASK ?? process.argv[2]
    if (raw === undefined) fail(2, "no task: set REINS_TASK to {\"question\": \"...\"} or pass the question as an argument")
    let task = raw
    try {
      task = JSON.parse(raw)
    } catch {
      // a plain question such as `node harness.mjs "3+4"` (3+4 itself is not JSON)
    }
    const question = typeof task === "object" && task !== null ? task.question : task
    if (typeof question === "number") return String(question)
    if (typeof question !== "string" || question.trim() === "") fail(2, `task has no question: ${raw.slice(0, 200)}`)
    return question
  }

  /** The task and the CALC_* settings with calc's defaults. */
  const readSettings = () => ({
    question: readQuestion(),
    temperature: numberSetting("CALC_TEMPERATURE", 1),
    maxTokens: numberSetting("CALC_MAX_TOKENS", 64, true),
    maxTurns: numberSetting("CALC_MAX_TURNS", 4, true)
  })

  const log = process.env.CALC_VERBOSE === "1" ? (line) => process.stderr.write(`${line}\n`) : () => {}

  return { fail, log, readSettings }
}
