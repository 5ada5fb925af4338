/** Worker-thread entry of the device actor (see `Device.workerLayer`). */
import { Worker } from "@reins/runtime"
import { Device, deviceHandlers, type DeviceOptions } from "./Device.js"

Worker.serve(Device, deviceHandlers(Worker.data() as DeviceOptions))
