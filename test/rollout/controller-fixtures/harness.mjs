#!/usr/bin/env node
// A harness for the controller tests; what it does comes from the task input (REINS_TASK):
//   {"mode": "answer", "answer": A, "sleepMs"?: N, "waitFile"?: F}
//                                                 sleeps N ms (and until file F exists), prints "answer: A", exits 0
//   {"mode": "crash"}                             prints to stderr, exits 3
//   {"mode": "hang"}                              sleeps until killed
// Every run appends "start|end <attempt id> <rollout id> <pid>" to $RUN_LOG when set (the tests
// count runs and kill what a killed launcher node left behind).
import { appendFileSync, existsSync } from "node:fs"

const task = JSON.parse(process.env.REINS_TASK ?? "null") ?? {}
if (process.env.RUN_LOG) appendFileSync(process.env.RUN_LOG, `start ${process.env.REINS_ATTEMPT_ID} ${process.env.REINS_ROLLOUT_ID} ${process.pid}\n`)
const done = (code) => {
  if (process.env.RUN_LOG) appendFileSync(process.env.RUN_LOG, `end ${process.env.REINS_ATTEMPT_ID} ${process.env.REINS_ROLLOUT_ID} ${process.pid}\n`)
  process.exit(code)
}
switch (task.mode) {
  case "answer": {
    const answer = () => {
      if (task.waitFile && !existsSync(task.waitFile)) return setTimeout(answer, 50)
      console.log(`thinking about ${process.env.REINS_TASK_ID}`)
      console.log(`answer: ${task.answer}`)
      done(0)
    }
    setTimeout(answer, task.sleepMs ?? 0)
    break
  }
  case "crash":
    console.error("boom")
    done(3)
    break
  case "hang":
    setInterval(() => {}, 1 << 30)
    break
  default:
    console.error(`unknown mode ${task.mode}`)
    done(64)
}
