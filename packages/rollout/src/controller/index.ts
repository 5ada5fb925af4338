/**
 * The Rollout Controller: the launcher actor every `rollout` node runs, the attempt ledger it
 * records through, and the controller service + actor that schedules rollouts over launchers.
 */
export * from "./launcherActor.js"
export * from "./ledger.js"
export * from "./Controller.js"
export * from "./controllerActor.js"
