/**
 * Harness specs: how to run the deployed agent (argv, cwd, env, timeouts, log caps, an optional
 * verifier, and for Kubernetes an image and a Job template). The Schema lives in @reins/protocol
 * because specs travel to launcher actors on other nodes; this module decodes user input into it
 * with errors that name the offending field.
 */
import { HarnessSpec, LaunchConfigError } from "@reins/protocol"
import { Effect, ParseResult, Schema } from "effect"

export { HarnessSpec, KubernetesHarnessSpec, VerifierSpec } from "@reins/protocol"

/**
 * One line per problem, `path: message`. Optional fields with defaults decode as `T | undefined`,
 * so a bad value also yields a useless "Expected undefined" issue for the same path: dropped.
 */
const formatIssues = (error: ParseResult.ParseError): string => {
  const issues = ParseResult.ArrayFormatter.formatErrorSync(error)
  const key = (i: (typeof issues)[number]) => i.path.join(".")
  return issues
    .filter((i) => !(i.message.startsWith("Expected undefined") && issues.some((o) => o !== i && key(o).startsWith(key(i)))))
    .map((i) => (i.path.length > 0 ? `${key(i)}: ${i.message}` : i.message))
    .join("; ")
}

/** Decodes a harness spec from config input (parsed JSON/YAML, or an object written in code). */
export const decodeHarnessSpec = (input: unknown): Effect.Effect<HarnessSpec, LaunchConfigError> =>
  Schema.decodeUnknown(HarnessSpec)(input, { onExcessProperty: "error", errors: "all" }).pipe(
    Effect.mapError((e) => new LaunchConfigError({ message: `invalid harness spec: ${formatIssues(e)}` }))
  )

/** Builds a spec in code with the defaults applied (`timeout_s` 600, `grace_s` 10, 1 MiB logs, ...). */
export const harnessSpec = (fields: ConstructorParameters<typeof HarnessSpec>[0]): HarnessSpec => new HarnessSpec(fields)

/** A spec for the Kubernetes launcher must say which image to run. */
export const requireKubernetes = (spec: HarnessSpec) =>
  spec.kubernetes === undefined
    ? Effect.fail(new LaunchConfigError({ message: "harness spec has no `kubernetes` section (image, namespace, ...): it cannot run as a Job" }))
    : Effect.succeed(spec.kubernetes)
