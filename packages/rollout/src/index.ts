/**
 * @reins/rollout: task sets and the task queue, harness specs and attempt environments, the
 * local-process and Kubernetes Job launchers, the verifier runner and `runAttempt`, which the
 * Rollout Controller schedules.
 */
export * from "./errors.js"
export * from "./tasks/taskSet.js"
export * from "./tasks/queue.js"
export * from "./harness/spec.js"
export * from "./harness/env.js"
export * from "./harness/files.js"
export * from "./harness/logTails.js"
export * from "./process/logCapture.js"
export * from "./process/spawner.js"
export * from "./launcher/Launcher.js"
export * from "./launcher/local.js"
export * from "./verifier.js"
export * from "./attempt.js"
export * from "./outcome.js"
export * from "./settle.js"
export * from "./launcher/k8s/names.js"
export * from "./launcher/k8s/template.js"
export * from "./launcher/k8s/tokenBucket.js"
export * from "./launcher/k8s/classify.js"
export * from "./launcher/k8s/config.js"
export * from "./launcher/k8s/tracker.js"
export * from "./launcher/k8s/launcher.js"
export * from "./controller/index.js"
