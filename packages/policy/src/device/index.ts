export {
  Device,
  type DeviceActor,
  type DeviceClient,
  deviceClient,
  deviceEngine,
  type DeviceOptions,
  TrainingDevice,
  workerLayer as deviceWorkerLayer
} from "./Device.js"
export { deviceHandlers } from "./handlers.js"
export { DEFAULT_MODEL_ID, defaultTokenizer, ensureDefaultPolicy } from "./defaultPolicy.js"
