/**
 * `npm run bench -- sim`: the cost model at larger scale — a discrete-event simulation of the
 * sync, collocated and split schedules (bench/sim/). See bench/sim/index.ts for the options.
 */
import { main } from "./sim/index.js"

export default (args: ReadonlyArray<string>): Promise<void> => main(args)
