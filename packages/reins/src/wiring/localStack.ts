/**
 * Every role of a run in one process: the device actor(s) in worker threads, the Gateway on a
 * loopback port, a local launcher, the Rollout Controller recording into the Gateway's store,
 * and the Trainer's ports wired to all of them. `reins train` and the tests build runs on it.
 */
import { HttpServer } from "@effect/platform"
import { Gateway } from "@reins/gateway"
import { Device, TrainingDevice, workerLayer as deviceWorkerLayer } from "@reins/policy/device"
import type { HarnessSpec, LoraSettings } from "@reins/protocol"
import { type ActorSystem } from "@reins/runtime"
import { AttemptLedger, launcherActorLayer, RolloutController, type RolloutControllerService } from "@reins/rollout/controller"
import { trainerError, type TrainerPorts } from "@reins/trainer"
import { Context, Duration, Effect, Layer, type Scope } from "effect"
import path from "node:path"
import { devicePort } from "./devicePort.js"
import { type ParserSettings, policyBackend } from "./policyBackend.js"
import { storeLedger } from "./storeLedger.js"

export interface LocalStackOptions {
  /** The policy to serve and train (a model directory). */
  readonly modelDir: string
  /** The store (`reins.db`), the admin token and the attempts' files. */
  readonly dataDir: string
  readonly harness: HarnessSpec
  /** Harness processes at once (default 8). */
  readonly concurrency?: number | undefined
  /** Attempts per rollout when infrastructure fails (default 3). */
  readonly maxAttempts?: number | undefined
  /** Start a second device for the split schedule. */
  readonly split?: boolean | undefined
  /** Train LoRA adapters on the training device (the only device, or the split schedule's second). */
  readonly lora?: LoraSettings | undefined
  /**
   * Run harnesses on this node too (default true). A node that joined a cluster with `rollout`
   * nodes can leave them all to those: the controller places attempts on every launcher it sees.
   */
  readonly localLauncher?: boolean | undefined
  /** Output parsers of the model's Hugging Face template (default: detected from the template). */
  readonly parsers?: ParserSettings | undefined
  /** Where the Gateway listens (default 127.0.0.1:0) and the `/v1` URL harnesses are given. */
  readonly http?: { readonly host: string; readonly port: number } | undefined
  readonly publicUrl?: string | undefined
}

export interface LocalStack {
  /** The agent-facing OpenAI URL (`…/v1`). */
  readonly openaiBaseUrl: string
  readonly gateway: Gateway.GatewayService
  readonly store: Gateway.GatewayService["store"]
  readonly controller: RolloutControllerService
  /** The Trainer's ports, except the task source (each run brings its own). */
  readonly ports: Omit<TrainerPorts, "tasks">
}

/** The Gateway on a free loopback port, its `gateway` actor, sampling through the device. */
const gatewayLayer = (options: LocalStackOptions) =>
  Layer.merge(Gateway.serve(options.http ?? { host: "127.0.0.1", port: 0 }), Gateway.actorLayer).pipe(
    // Updates take seconds here, not minutes: a call held an hour means something is stuck.
    Layer.provideMerge(Gateway.layer({
      dataDir: options.dataDir,
      maxHold: Duration.hours(1)
    })),
    Layer.provide(policyBackend(options.parsers))
  )

/** Builds the stack in the current scope (everything stops when it closes). */
export const localStack = (options: LocalStackOptions): Effect.Effect<LocalStack, unknown, Scope.Scope | ActorSystem> =>
  Effect.gen(function*() {
    const lora = options.lora === undefined
      ? {}
      : { lora: { rank: options.lora.rank, alpha: options.lora.alpha, dropout: options.lora.dropout, targets: [...options.lora.target_modules] } }
    yield* Layer.build(deviceWorkerLayer({ modelDir: options.modelDir, ...(options.split ? {} : lora) }, Device))
    if (options.split) yield* Layer.build(deviceWorkerLayer({ modelDir: options.modelDir, ...lora }, TrainingDevice))
    const served = yield* Layer.build(gatewayLayer(options))
    const server = Context.get(served, HttpServer.HttpServer)
    const gateway = Context.get(served, Gateway.Gateway)
    if (server.address._tag !== "TcpAddress") return yield* Effect.dieMessage("the Gateway did not bind a TCP port")
    const openaiBaseUrl = options.publicUrl ?? `http://${server.address.hostname}:${server.address.port}/v1`
    if (options.localLauncher ?? true) {
      yield* Layer.build(launcherActorLayer({ kind: "local", dataDir: path.join(options.dataDir, "rollout") }, { maxConcurrent: options.concurrency ?? 8 }))
    }
    const controllerContext = yield* Layer.build(
      RolloutController.layer({ harness: options.harness, endpoints: { openaiBaseUrl }, maxAttempts: options.maxAttempts ?? 3 }).pipe(
        Layer.provide(Layer.succeed(AttemptLedger, storeLedger(gateway.store)))
      )
    )
    const controller = Context.get(controllerContext, RolloutController)
    const generation = yield* devicePort(Device)
    const training = options.split ? yield* devicePort(TrainingDevice) : generation
    return {
      openaiBaseUrl,
      gateway,
      store: gateway.store,
      controller,
      ports: {
        controller: controllerPort(controller),
        records: {
          rollout: (id) => Effect.mapError(gateway.store.rolloutTrace(id), trainerError("read rollout")),
          recordTrained: (calls) => Effect.mapError(gateway.store.recordTrained(calls), trainerError("record what was trained"))
        },
        gateway: {
          pause: (mode) => Effect.mapError(gateway.pause(mode), trainerError("pause the Gateway")),
          resume: Effect.mapError(gateway.resume, trainerError("resume the Gateway")),
          state: gateway.state,
          swapped: gateway.swapped
        },
        generation,
        training
      }
    }
  })

/** The controller as the Trainer sees it: groups of one task, admission by group. */
export const controllerPort = (controller: RolloutControllerService): TrainerPorts["controller"] => ({
  submit: (item, size, groupId) =>
    Effect.mapError(controller.submit({ task: item.task, taskExtra: item.extra, size, groupId }), trainerError("submit a group")),
  awaitGroup: (groupId) => Effect.mapError(controller.awaitGroup(groupId), trainerError("await a group")),
  setAdmission: (admission) => controller.setAdmission(admission === null ? null : (request) => admission(request.groupId)),
  reconsider: controller.reconsider,
  cancel: (rolloutId, reason) => controller.cancel(rolloutId, reason)
})
