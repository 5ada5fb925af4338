/** Task sets and the task queue, without the launchers (so a process can read tasks without loading the Kubernetes client). */
export * from "./taskSet.js"
export * from "./queue.js"
