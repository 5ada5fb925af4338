/**
 * The environment of one attempt. The harness is the agent as deployed: it only needs an
 * endpoint and key of the API it speaks, so those come as the standard variables of both SDKs —
 * `OPENAI_BASE_URL` / `OPENAI_API_KEY` (chat completions, Responses) and `ANTHROPIC_BASE_URL` /
 * `ANTHROPIC_API_KEY` (Messages; the SDK appends `/v1/messages`, so its URL is the Gateway's origin
 * without `/v1`); everything reins-specific is `REINS_*`.
 *
 * Order of precedence (last wins): the node's environment (local launcher, `inherit_env`, minus
 * its `OPENAI_*`/`ANTHROPIC_*`/`REINS_*` variables), the spec's `env`, the attempt variables. The
 * attempt variables always win: a spec that sets `OPENAI_API_KEY` would otherwise send calls to
 * the wrong rollout.
 */
import type { AttemptEndpointsSchema, HarnessSpec, LaunchSpec, Task } from "@reins/protocol"

/**
 * Where the harness reaches the Gateway. `openaiBaseUrl` is the agent-facing `/v1` URL (it may
 * differ from the admin URL); `rewardUrl` defaults to `<openaiBaseUrl>/reward`.
 */
export type AttemptEndpoints = typeof AttemptEndpointsSchema.Type

/** The attempt's ids and the Gateway's key for it: calls made with the key are recorded against it. */
export type AttemptIdentity = Pick<LaunchSpec, "rolloutId" | "attemptId" | "attemptKey">

/** The Anthropic SDK's base URL for the Gateway: the `/v1` URL without its `/v1`. */
export const anthropicBaseUrlOf = (endpoints: AttemptEndpoints): string => endpoints.openaiBaseUrl.replace(/\/+$/, "").replace(/\/v1$/, "")

export const rewardUrlOf = (endpoints: AttemptEndpoints): string =>
  endpoints.rewardUrl ?? `${endpoints.openaiBaseUrl.replace(/\/+$/, "")}/reward`

/** The task input as the harness sees it (`REINS_TASK`, and the content of `REINS_TASK_FILE`). */
export const taskInputJson = (task: Task): string => JSON.stringify(task.input ?? null)

/** Just the attempt variables (also what the Kubernetes launcher injects into every container). */
export const attemptVariables = (p: {
  readonly identity: AttemptIdentity
  readonly task: Task
  readonly endpoints: AttemptEndpoints
  /** Path of the task file as the harness sees it (a local path, or a path inside the pod). */
  readonly taskFile: string
}): Record<string, string> => ({
  OPENAI_BASE_URL: p.endpoints.openaiBaseUrl,
  OPENAI_API_KEY: p.identity.attemptKey,
  ANTHROPIC_BASE_URL: anthropicBaseUrlOf(p.endpoints),
  ANTHROPIC_API_KEY: p.identity.attemptKey,
  REINS_TASK: taskInputJson(p.task),
  REINS_TASK_FILE: p.taskFile,
  REINS_TASK_ID: p.task.id,
  REINS_REWARD_URL: rewardUrlOf(p.endpoints),
  REINS_ROLLOUT_ID: p.identity.rolloutId,
  REINS_ATTEMPT_ID: p.identity.attemptId
})

/** The full environment of a local harness process. */
export const attemptEnv = (p: {
  readonly spec: HarnessSpec
  readonly identity: AttemptIdentity
  readonly task: Task
  readonly endpoints: AttemptEndpoints
  readonly taskFile: string
  /** The node's environment; default `process.env`. */
  readonly base?: Readonly<Record<string, string | undefined>>
}): Record<string, string> => {
  // The node's own OPENAI_*/ANTHROPIC_*/REINS_* settings (a developer's real key, org or
  // project) must not leak into an attempt: they would change where or as whom the harness calls.
  const env = p.spec.inherit_env ? envWithout(p.base ?? process.env, /^(OPENAI|ANTHROPIC|REINS)_/) : {}
  return Object.assign(env, p.spec.env, attemptVariables(p))
}

/** The set variables of `base` whose names do not match `excluded`. */
export const envWithout = (base: Readonly<Record<string, string | undefined>>, excluded: RegExp): Record<string, string> =>
  Object.fromEntries(Object.entries(base).filter((e): e is [string, string] => e[1] !== undefined && !excluded.test(e[0])))
