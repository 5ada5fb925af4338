export { Device, deviceEngine, workerLayer as deviceWorkerLayer, type DeviceOptions } from "./Device.js"
export { deviceHandlers } from "./handlers.js"
export { DEFAULT_MODEL_ID, defaultTokenizer, ensureDefaultPolicy } from "./defaultPolicy.js"
