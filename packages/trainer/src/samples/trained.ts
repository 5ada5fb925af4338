/**
 * What an update trained of each call, for the store (the dashboard's token view shows it per
 * token): a sample's advantages are constant over each call's response span (per rollout, or per
 * turn with per-turn rewards) and its loss weights over the whole segment, so one row per span
 * says exactly what every trained token received.
 */
import { TrainedCall } from "@reins/protocol"
import type { Sample } from "../normalization.js"

export const trainedCalls = (samples: ReadonlyArray<Sample>, version: number): Array<TrainedCall> =>
  samples.flatMap((s) =>
    s.spans
      .filter((span) => span.end > span.start)
      .map((span) =>
        new TrainedCall({
          callId: span.callId,
          rolloutId: s.rolloutId,
          version,
          advantage: s.advantages[span.start]!,
          weight: s.weights[span.start]!,
          tokens: span.end - span.start
        })
      )
  )
