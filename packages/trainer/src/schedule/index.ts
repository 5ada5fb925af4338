/** The Trainer's schedules: one run loop over ports to the controller, the Gateway and the device(s). */
export * from "./ports.js"
export * from "./StalenessGate.js"
export * from "./checkpoints.js"
export * from "./update.js"
export * from "./run.js"
export * from "./failures.js"
export * from "./actor.js"
export * from "./dynamicSampling.js"
