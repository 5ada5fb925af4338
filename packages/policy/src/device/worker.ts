/** Worker-thread entry of the device actor (see `Device.workerLayer`). */
import { Worker } from "@reins/runtime"
import { Device, type DeviceOptions } from "./Device.js"
import { deviceHandlers } from "./handlers.js"

Worker.serve(Device, deviceHandlers(Worker.data() as DeviceOptions))
