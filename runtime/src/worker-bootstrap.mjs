// Entry of every reins worker thread. Node 20 ignores `--import tsx` in a Worker's execArgv, so a
// worker starts here instead: register tsx's ESM loader in this thread, then import the real
// (TypeScript) entry module named in workerData.
import { workerData } from "node:worker_threads"
import { register } from "tsx/esm/api"

register()
await import(workerData.entry)
