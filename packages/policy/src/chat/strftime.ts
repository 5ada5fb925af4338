/**
 * `strftime_now` for chat templates (Llama 3.1 writes "Today Date: 26 Jul 2024" with
 * `strftime_now("%d %b %Y")`). Python's C-locale names, whatever the machine's locale, and the
 * clock is injectable so that renders can be reproduced. Unknown directives are left as written.
 */
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]

const pad = (n: number, width = 2) => String(n).padStart(width, "0")

const dayOfYear = (d: Date) => Math.round((Date.UTC(d.getFullYear(), d.getMonth(), d.getDate()) - Date.UTC(d.getFullYear(), 0, 1)) / 86_400_000) + 1

const DIRECTIVES: Readonly<Record<string, (d: Date) => string>> = {
  Y: (d) => String(d.getFullYear()),
  y: (d) => pad(d.getFullYear() % 100),
  m: (d) => pad(d.getMonth() + 1),
  d: (d) => pad(d.getDate()),
  e: (d) => String(d.getDate()).padStart(2, " "),
  H: (d) => pad(d.getHours()),
  I: (d) => pad(d.getHours() % 12 === 0 ? 12 : d.getHours() % 12),
  M: (d) => pad(d.getMinutes()),
  S: (d) => pad(d.getSeconds()),
  p: (d) => (d.getHours() < 12 ? "AM" : "PM"),
  B: (d) => MONTHS[d.getMonth()]!,
  b: (d) => MONTHS[d.getMonth()]!.slice(0, 3),
  A: (d) => DAYS[d.getDay()]!,
  a: (d) => DAYS[d.getDay()]!.slice(0, 3),
  j: (d) => pad(dayOfYear(d), 3),
  "%": () => "%"
}

/** Formats `date` in local time, as Python's `datetime.now().strftime(format)` does. */
export const strftime = (date: Date, format: string): string =>
  format.replace(/%([a-zA-Z%])/g, (directive, c: string) => DIRECTIVES[c]?.(date) ?? directive)
