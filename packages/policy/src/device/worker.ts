/** Worker-thread entry of a device actor (see `workerLayer` in Device.ts). */
import { Worker } from "@reins/runtime"
import { Device, type DeviceWorkerData } from "./Device.js"
import { deviceHandlers } from "./handlers.js"

const data = Worker.data() as DeviceWorkerData
Worker.serve({ name: data.actorName ?? Device.name, protocol: Device.protocol }, deviceHandlers(data))
