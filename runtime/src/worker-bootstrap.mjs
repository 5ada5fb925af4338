// Entry of a reins worker thread whose entry module is TypeScript (this repository's sources; a
// compiled entry starts directly). Node 20 ignores `--import tsx` in a Worker's execArgv, so such a
// worker starts here instead: register tsx's ESM loader in this thread, then import the real entry
// module named in workerData.
import { workerData } from "node:worker_threads"
import { register } from "tsx/esm/api"

register()
await import(workerData.entry)
