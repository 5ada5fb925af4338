/**
 * Generation devices and the rollouts running on them.
 *
 * Each device hosts its own engine doing continuous batching: all sequences it decodes share
 * the device, each advancing at `decodeRate(c) / c` tokens/s when `c` are active (processor
 * sharing). Instead of touching every sequence at each change, a device keeps a "virtual token"
 * clock V (tokens each active sequence has produced since the device started) and a heap of
 * the V at which each sequence finishes; only the earliest one matters, and the devices'
 * next-completion times sit in one indexed heap that the event queue draws from.
 *
 * A rollout is pinned at its start to the device with the fewest live rollouts (a load balancer
 * with sticky routing, as engines keep a rollout's prefix cached). The gate models the
 * Gateway's pause: while closed, new model calls are held (the harness just waits); `freeze`
 * stops decoding mid-sequence (interrupt at a token boundary) and `unfreeze` continues it.
 */
import { type EventQueue, IndexedMinHeap, MinHeap } from "./heap.js"
import { type DecodePoint, decodeRate } from "./profile.js"
import type { RolloutSpec } from "./workload.js"

export interface Group {
  readonly id: number
  readonly rollouts: Array<Rollout>
  /** The version serving when the group was admitted (the staleness gate ages groups by it). */
  readonly startVersion: number
  finished: number
}

export interface Rollout {
  readonly id: number
  readonly spec: RolloutSpec
  readonly group: Group
  readonly startVersion: number
  readonly device: Device
  readonly startedAt: number
  turn: number
  heldSince: number
  finishedAt: number
}

export class Device {
  readonly seqs = new MinHeap<Rollout>()
  /** Virtual tokens: what every active sequence has produced since t = 0. */
  v = 0
  lastT = 0
  frozen = false
  /** Live rollouts pinned here (decoding, in tool time or held): what the load balancer balances. */
  pinned = 0
  /** Seconds during which at least one sequence was decoding. */
  generating = 0
  /** ∫ active sequences dt while generating: mean concurrency = this / generating. */
  seqSeconds = 0
  constructor(readonly index: number) {}
}

export class Cluster {
  readonly devices: Array<Device>
  private readonly perSeq: Array<number> = [0]
  private readonly next: IndexedMinHeap
  /** Rollouts in harness time (start-up or a tool run), keyed by when they call again or exit. */
  private readonly timers = new MinHeap<Rollout>()
  private readonly done: Array<Rollout> = []
  private gateOpen = true
  private held: Array<Rollout> = []
  private inFlight = 0
  /** Called once when the gate is closed and the last in-flight generation finishes (drain). */
  private onDrained: (() => void) | undefined
  /** Total seconds model calls spent held by the gate, and how many were held. */
  heldSeconds = 0
  heldCalls = 0
  calls = 0

  constructor(
    private readonly q: EventQueue,
    count: number,
    private readonly curve: ReadonlyArray<DecodePoint>,
    private readonly onFinished: (r: Rollout) => void
  ) {
    this.devices = Array.from({ length: count }, (_, i) => new Device(i))
    this.next = new IndexedMinHeap(count)
    q.attach({ nextTime: () => this.next.minKey(), fire: () => this.complete(this.devices[this.next.minItem()]!) })
    q.attach({ nextTime: () => this.timers.peekKey(), fire: () => this.harnessDone(this.timers.pop()!) })
  }

  /** Least-loaded device; the lowest index wins ties so runs are deterministic. */
  pick(): Device {
    let best = this.devices[0]!
    for (const d of this.devices) if (d.pinned < best.pinned) best = d
    return best
  }

  start(r: Rollout): void {
    r.device.pinned++
    this.timers.push(this.q.now + r.spec.launch_s, r)
  }

  get inFlightCalls(): number {
    return this.inFlight
  }

  closeGate(): void {
    this.gateOpen = false
  }

  /** Reopens the gate; held calls go to their devices in the order they arrived. */
  openGate(): void {
    this.gateOpen = true
    const held = this.held
    this.held = []
    // Counted at release, so calls still held when the run stops don't skew the mean.
    this.heldCalls += held.length
    for (const r of held) {
      this.heldSeconds += this.q.now - r.heldSince
      this.decode(r)
    }
  }

  /** Runs `fn` once no generation is in flight (now, if none is). The gate should be closed. */
  whenDrained(fn: () => void): void {
    if (this.inFlight === 0) fn()
    else this.onDrained = fn
  }

  freeze(): void {
    for (const d of this.devices) {
      this.advance(d)
      d.frozen = true
      this.next.set(d.index, Infinity)
    }
  }

  unfreeze(): void {
    for (const d of this.devices) {
      d.lastT = this.q.now
      d.frozen = false
      this.reschedule(d)
    }
  }

  private rate(c: number): number {
    while (this.perSeq.length <= c) {
      const k = this.perSeq.length
      this.perSeq.push(decodeRate(this.curve, k) / k)
    }
    return this.perSeq[c]!
  }

  private call(r: Rollout): void {
    this.calls++
    if (this.gateOpen) return this.decode(r)
    r.heldSince = this.q.now
    this.held.push(r)
  }

  private decode(r: Rollout): void {
    const d = r.device
    this.advance(d)
    d.seqs.push(d.v + r.spec.turns[r.turn]!.tokens, r)
    this.inFlight++
    this.reschedule(d)
  }

  private advance(d: Device): void {
    const dt = this.q.now - d.lastT
    const c = d.seqs.size
    if (!d.frozen && c > 0 && dt > 0) {
      d.v += this.rate(c) * dt
      d.generating += dt
      d.seqSeconds += c * dt
    }
    d.lastT = this.q.now
  }

  private reschedule(d: Device): void {
    if (d.frozen || d.seqs.size === 0) return this.next.set(d.index, Infinity)
    this.next.set(d.index, this.q.now + Math.max(0, (d.seqs.peekKey() - d.v) / this.rate(d.seqs.size)))
  }

  private complete(d: Device): void {
    this.advance(d)
    // Relative tolerance: V accumulates rounding error over many events.
    const eps = 1e-9 * Math.max(1, d.v)
    const done = this.done
    while (d.seqs.size > 0 && d.seqs.peekKey() <= d.v + eps) done.push(d.seqs.pop()!)
    this.inFlight -= done.length
    this.reschedule(d)
    // The harness works off-device (tool run, tests), then calls again or exits.
    for (const r of done) this.timers.push(this.q.now + r.spec.turns[r.turn++]!.tool_s, r)
    done.length = 0
    if (this.inFlight === 0 && this.onDrained !== undefined) {
      const fn = this.onDrained
      this.onDrained = undefined
      fn()
    }
  }

  /** End of start-up or of a tool run: the harness calls the model again, or exits. */
  private harnessDone(r: Rollout): void {
    if (r.turn < r.spec.turns.length) return this.call(r)
    r.finishedAt = this.q.now
    r.device.pinned--
    this.onFinished(r)
  }
}
