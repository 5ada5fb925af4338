/**
 * Prometheus metrics of one Gateway (its own registry, so several gateways can live in one
 * process): requests, latencies, tokens, held calls, pauses. Served at `GET /metrics`.
 */
import { Context, Layer } from "effect"
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client"

const make = () => {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry, prefix: "reins_gateway_process_" })
  const registers = [registry]
  return {
    registry,
    requests: new Counter({
      name: "reins_gateway_requests_total",
      help: "HTTP requests answered, by route and status",
      labelNames: ["route", "status"],
      registers
    }),
    latency: new Histogram({
      name: "reins_gateway_request_duration_seconds",
      help: "Time from request to the start of the response (for streams: until the stream begins)",
      labelNames: ["route"],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
      registers
    }),
    tokens: new Counter({
      name: "reins_gateway_tokens_total",
      help: "Tokens by kind: prompt, reused (prompt tokens copied from earlier calls), completion",
      labelNames: ["kind"],
      registers
    }),
    held: new Gauge({ name: "reins_gateway_held_calls", help: "Calls waiting at the pause gate", registers }),
    inFlight: new Gauge({ name: "reins_gateway_in_flight_calls", help: "Calls past the gate whose generation has not ended", registers }),
    paused: new Gauge({ name: "reins_gateway_paused", help: "1 while the gateway is paused", registers }),
    deviceBackend: new Gauge({
      name: "reins_gateway_device_backend",
      help: "1 for the TensorFlow.js backend the policy runs on (label backend: tensorflow, webgpu, wasm, cpu)",
      labelNames: ["backend"],
      registers
    }),
    heldSeconds: new Histogram({
      name: "reins_gateway_held_seconds",
      help: "How long calls waited at the pause gate",
      buckets: [0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
      registers
    }),
    pauseSeconds: new Histogram({
      name: "reins_gateway_pause_seconds",
      help: "How long pauses lasted (pause to resume)",
      buckets: [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
      registers
    }),
    drainSeconds: new Histogram({
      name: "reins_gateway_drain_seconds",
      help: "How long a pause took to free the device",
      buckets: [0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers
    })
  }
}

export type MetricsService = ReturnType<typeof make>

export class Metrics extends Context.Tag("@reins/gateway/Metrics")<Metrics, MetricsService>() {}

export const layer: Layer.Layer<Metrics> = Layer.sync(Metrics, make)
