/**
 * Pod log capture. The log of the harness container is read once the attempt has ended, with
 * `limitBytes` so the API server itself never sends more than the cap (+1 byte, to know that the
 * cut happened), and written under the same cap rules as local logs. Kubernetes merges stdout
 * and stderr in the pod log, so it all lands in stdout.log; stderr.log stays empty.
 *
 * A log that cannot be read (pod evicted and gone, node lost) is not an error of the attempt:
 * the file then says why it is empty.
 */
import type { V1Pod } from "@kubernetes/client-node"
import { AttemptLogs, LogCapture } from "@reins/protocol"
import { Effect } from "effect"
import type { AttemptFiles } from "../../harness/files.js"
import { writeCappedLog } from "../../process/logCapture.js"
import type { KubeApi } from "./api.js"

export const capturePodLogs = (p: {
  readonly api: KubeApi
  readonly namespace: string
  readonly pods: ReadonlyArray<V1Pod>
  readonly container: string | undefined
  readonly files: AttemptFiles
  readonly maxLogBytes: number
}): Effect.Effect<AttemptLogs> =>
  Effect.gen(function*() {
    const pod = p.pods.at(-1)
    const name = pod?.metadata?.name
    const container = p.container ?? pod?.spec?.containers?.[0]?.name
    const text = name === undefined || container === undefined
      ? "[reins: no pod of this Job was seen; no log to capture]\n"
      : yield* p.api.readPodLog(p.namespace, name, container, p.maxLogBytes + 1).pipe(
        Effect.catchAll((e) => Effect.succeed(`[reins: log of pod ${name} unavailable: ${e.message}]\n`))
      )
    // A local disk problem while writing must not lose the outcome: the logs are then empty.
    const write = (path: string, content: string) =>
      Effect.try(() => writeCappedLog(path, content, p.maxLogBytes)).pipe(
        Effect.orElseSucceed(() => new LogCapture({ path, bytes: 0, droppedBytes: Buffer.byteLength(content) }))
      )
    return new AttemptLogs({ stdout: yield* write(p.files.stdout, text), stderr: yield* write(p.files.stderr, "") })
  })
