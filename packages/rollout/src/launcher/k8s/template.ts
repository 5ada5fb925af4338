/**
 * Job templates and the Job of one attempt.
 *
 * A template is either a function `(params) => V1Job` (in a config module) or a YAML file whose
 * string values may hold `{{placeholders}}`. Placeholders are substituted in the *parsed* YAML,
 * never in its text, so an id or a task full of quotes cannot change the Job's structure. A value
 * that is exactly one placeholder takes the parameter's type (`command: "{{command}}"` becomes
 * the argv list, `"{{timeout_s}}"` a number); a list element that is exactly a list placeholder
 * is spliced in (`command: ["/entrypoint", "{{command}}"]`).
 *
 * The YAML is read with the `yaml` package, not the client's `loadYaml`: that one converts to the
 * typed model first, which would turn `command: "{{command}}"` into a list of characters.
 *
 * Whatever the template says, `buildJob` then enforces what reins relies on: the name, labels
 * and annotations, `backoffLimit: 0` (a retry is a new attempt, decided by the controller),
 * `restartPolicy: Never`, `activeDeadlineSeconds`, `ttlSecondsAfterFinished`, the attempt env in
 * every container and the task file mounted from a pod annotation via the downward API (no
 * ConfigMap to create and clean up, no extra RBAC).
 */
import type { V1Container, V1EnvVar, V1Job } from "@kubernetes/client-node"
import { LaunchConfigError } from "@reins/protocol"
import { Effect } from "effect"
import { readFile } from "node:fs/promises"
import { parse as parseYaml } from "yaml"
import {
  ANNOTATION_ATTEMPT_ID,
  ANNOTATION_CONTAINER,
  ANNOTATION_GIVE_UP_AT,
  ANNOTATION_MAX_LOG_BYTES,
  ANNOTATION_ROLLOUT_ID,
  ANNOTATION_TASK,
  LABEL_ATTEMPT,
  LABEL_MANAGED_BY,
  LABEL_OWNER,
  LABEL_ROLLOUT,
  labelValue,
  MANAGED_BY,
  TASK_MOUNT_DIR
} from "./names.js"

/** What a template can use. In YAML: `{{job_name}}`, `{{image}}`, `{{command}}`, ... */
export interface JobTemplateParams {
  readonly job_name: string
  readonly namespace: string
  readonly image: string
  readonly command: ReadonlyArray<string>
  readonly cwd: string
  readonly rollout_id: string
  readonly attempt_id: string
  readonly task_id: string
  readonly rollout_label: string
  readonly attempt_label: string
  readonly timeout_s: number
  readonly grace_s: number
  readonly ttl_s: number
}

export type JobTemplate = (params: JobTemplateParams) => V1Job

/** Without a template: one container running the harness command in the image. */
export const defaultJobTemplate: JobTemplate = (p) => ({
  apiVersion: "batch/v1",
  kind: "Job",
  metadata: {},
  spec: {
    template: {
      spec: {
        restartPolicy: "Never",
        containers: [{ name: "harness", image: p.image, command: [...p.command], ...(p.cwd === "" ? {} : { workingDir: p.cwd }) }]
      }
    }
  }
})

type Param = string | number | ReadonlyArray<string>

const substitute = (value: unknown, params: Record<string, Param>, where: string): unknown => {
  if (typeof value === "string") {
    const whole = /^\{\{\s*([a-z_]+)\s*\}\}$/.exec(value)
    if (whole !== null) {
      const v = params[whole[1]!]
      if (v === undefined) throw new Error(`${where}: unknown placeholder {{${whole[1]}}}`)
      return typeof v === "object" ? [...v] : v
    }
    return value.replace(/\{\{\s*([a-z_]+)\s*\}\}/g, (_, name: string) => {
      const v = params[name]
      if (v === undefined) throw new Error(`${where}: unknown placeholder {{${name}}}`)
      if (typeof v === "object") throw new Error(`${where}: {{${name}}} is a list and must be the whole value`)
      return String(v)
    })
  }
  if (Array.isArray(value)) {
    return value.flatMap((v, i) => {
      const whole = typeof v === "string" ? /^\{\{\s*([a-z_]+)\s*\}\}$/.exec(v) : null
      const p = whole === null ? undefined : params[whole[1]!]
      return Array.isArray(p) ? [...p] : [substitute(v, params, `${where}[${i}]`)]
    })
  }
  if (value instanceof Date) return value
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [k, substitute(v, params, `${where}.${k}`)]))
  }
  return value
}

/** Renders a parsed template with `params`; throws with the path of a bad placeholder. */
export const renderTemplate = (template: unknown, params: JobTemplateParams): V1Job =>
  substitute(template, params as unknown as Record<string, Param>, "template") as V1Job

/** Reads a YAML template once; the returned function renders it per attempt. */
export const loadJobTemplateFile = (path: string): Effect.Effect<JobTemplate, LaunchConfigError> =>
  Effect.tryPromise({
    try: () => readFile(path, "utf8"),
    catch: (e) => new LaunchConfigError({ message: `cannot read Job template ${path}: ${(e as Error).message}` })
  }).pipe(
    Effect.flatMap((text) =>
      Effect.try({
        try: () => parseYaml(text) as V1Job,
        catch: (e) => new LaunchConfigError({ message: `Job template ${path} is not valid YAML: ${(e as Error).message}` })
      })
    ),
    Effect.filterOrFail(
      (doc) => typeof doc === "object" && doc !== null && doc.kind === "Job" && doc.apiVersion === "batch/v1",
      () => new LaunchConfigError({ message: `Job template ${path} must be one document with apiVersion: batch/v1 and kind: Job` })
    ),
    Effect.map((doc): JobTemplate => (params) => renderTemplate(doc, params))
  )

/** What `buildJob` injects besides the template. */
export interface JobInjection {
  readonly params: JobTemplateParams
  /** The launcher that owns the Job (`reins.dev/owner`). */
  readonly owner: string
  /** Spec env, then attempt variables (the latter win). */
  readonly env: Readonly<Record<string, string>>
  readonly taskJson: string
  readonly maxLogBytes: number
  readonly container: string | undefined
  readonly serviceAccount: string | undefined
  readonly giveUpAt: number
}

/** Kubernetes caps all annotations of an object at 256 KiB; the task must fit well below. */
const MAX_TASK_ANNOTATION = 192 * 1024

const withEnv = (c: V1Container, env: Readonly<Record<string, string>>): V1Container => ({
  ...c,
  env: [...(c.env ?? []).filter((e) => !(e.name in env)), ...Object.entries(env).map(([name, value]): V1EnvVar => ({ name, value }))],
  volumeMounts: [...(c.volumeMounts ?? []).filter((m) => m.name !== "reins-task"), { name: "reins-task", mountPath: TASK_MOUNT_DIR, readOnly: true }]
})

/** Renders the template and enforces reins' fields. Fails with a clear message on a bad template. */
export const buildJob = (template: JobTemplate, inj: JobInjection): Effect.Effect<V1Job, LaunchConfigError> =>
  Effect.try({
    try: () => assemble(template(inj.params), inj),
    catch: (e) => (e instanceof LaunchConfigError ? e : new LaunchConfigError({ message: `Job template: ${(e as Error).message}` }))
  })

const assemble = (rendered: V1Job, inj: JobInjection): V1Job => {
  const p = inj.params
  if (Buffer.byteLength(inj.taskJson) > MAX_TASK_ANNOTATION) {
    throw new LaunchConfigError({ message: `task ${p.task_id}: input is ${Buffer.byteLength(inj.taskJson)} bytes, more than a pod annotation can hold (${MAX_TASK_ANNOTATION})` })
  }
  const podSpec = rendered.spec?.template?.spec
  if (podSpec === undefined || (podSpec.containers ?? []).length === 0) throw new Error("spec.template.spec.containers is empty")
  const harnessName = inj.container ?? podSpec.containers[0]!.name
  if (!podSpec.containers.some((c) => c.name === harnessName)) {
    throw new Error(`no container named ${harnessName} (containers: ${podSpec.containers.map((c) => c.name).join(", ")})`)
  }
  const labels = {
    [LABEL_MANAGED_BY]: MANAGED_BY,
    [LABEL_OWNER]: labelValue(inj.owner),
    [LABEL_ROLLOUT]: p.rollout_label,
    [LABEL_ATTEMPT]: p.attempt_label
  }
  const annotations = {
    [ANNOTATION_ROLLOUT_ID]: p.rollout_id,
    [ANNOTATION_ATTEMPT_ID]: p.attempt_id,
    [ANNOTATION_MAX_LOG_BYTES]: String(inj.maxLogBytes),
    [ANNOTATION_CONTAINER]: harnessName,
    [ANNOTATION_GIVE_UP_AT]: String(inj.giveUpAt)
  }
  // The harness container defaults to the spec's image and command when the template leaves them out.
  const containers = podSpec.containers.map((c) =>
    withEnv(
      c.name !== harnessName
        ? c
        : { ...c, image: c.image ?? p.image, ...(c.command === undefined && c.args === undefined ? { command: [...p.command] } : {}) },
      inj.env
    )
  )
  const templateMeta = rendered.spec!.template.metadata ?? {}
  return {
    ...rendered,
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: {
      ...rendered.metadata,
      name: p.job_name,
      namespace: p.namespace,
      labels: { ...rendered.metadata?.labels, ...labels },
      annotations: { ...rendered.metadata?.annotations, ...annotations }
    },
    spec: {
      ...rendered.spec!,
      backoffLimit: 0,
      activeDeadlineSeconds: Math.max(1, Math.ceil(p.timeout_s)),
      ttlSecondsAfterFinished: p.ttl_s,
      template: {
        ...rendered.spec!.template,
        metadata: {
          ...templateMeta,
          labels: { ...templateMeta.labels, ...labels },
          annotations: { ...templateMeta.annotations, [ANNOTATION_TASK]: inj.taskJson }
        },
        spec: {
          ...podSpec,
          restartPolicy: "Never",
          terminationGracePeriodSeconds: Math.ceil(p.grace_s),
          ...(inj.serviceAccount === undefined ? {} : { serviceAccountName: inj.serviceAccount }),
          containers,
          ...(podSpec.initContainers === undefined ? {} : { initContainers: podSpec.initContainers.map((c) => withEnv(c, inj.env)) }),
          volumes: [
            ...(podSpec.volumes ?? []).filter((v) => v.name !== "reins-task"),
            {
              name: "reins-task",
              downwardAPI: { items: [{ path: "task.json", fieldRef: { fieldPath: `metadata.annotations['${ANNOTATION_TASK}']` } }] }
            }
          ]
        }
      }
    }
  }
}
