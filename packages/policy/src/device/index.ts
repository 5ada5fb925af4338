export { Device, deviceEngine, deviceHandlers, workerLayer as deviceWorkerLayer, type DeviceOptions } from "./Device.js"
export { DEFAULT_MODEL_ID, defaultTokenizer, ensureDefaultPolicy } from "./defaultPolicy.js"
