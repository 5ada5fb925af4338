// A module named after a service (Store, Gateway, Controller, Device, Trainer) is called
// `…Schema`: the service itself lives in its package; these are the schemas it speaks.
export * from "./Generation.js"
export * from "./StoreSchema.js"
export * from "./GatewaySchema.js"
export * from "./Rollout.js"
export * from "./Chat.js"
export * from "./TrainerSchema.js"
export * from "./ControllerSchema.js"
export * from "./DeviceSchema.js"
export * from "./Shuffle.js"
export * from "./Chain.js"
