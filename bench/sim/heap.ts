/**
 * The event queue: a binary min-heap of (time, insertion order). The insertion order breaks ties,
 * so events at the same instant run in the order they were scheduled — which is what makes the
 * simulation deterministic (no dependence on heap internals).
 */
export class MinHeap<T> {
  private readonly keys: Array<number> = []
  private readonly orders: Array<number> = []
  private readonly items: Array<T> = []
  private counter = 0

  get size(): number {
    return this.items.length
  }

  peekKey(): number {
    return this.keys.length > 0 ? this.keys[0]! : Infinity
  }

  push(key: number, item: T): void {
    this.keys.push(key)
    this.orders.push(this.counter++)
    this.items.push(item)
    this.up(this.items.length - 1)
  }

  pop(): T | undefined {
    const n = this.items.length
    if (n === 0) return undefined
    const top = this.items[0]!
    this.move(n - 1, 0)
    this.keys.pop()
    this.orders.pop()
    this.items.pop()
    if (n > 2) this.down(0)
    return top
  }

  clear(): void {
    this.keys.length = 0
    this.orders.length = 0
    this.items.length = 0
  }

  private less(a: number, b: number): boolean {
    const ka = this.keys[a]!, kb = this.keys[b]!
    return ka < kb || (ka === kb && this.orders[a]! < this.orders[b]!)
  }

  private move(from: number, to: number): void {
    this.keys[to] = this.keys[from]!
    this.orders[to] = this.orders[from]!
    this.items[to] = this.items[from]!
  }

  private swap(a: number, b: number): void {
    const k = this.keys[a]!, o = this.orders[a]!, it = this.items[a]!
    this.move(b, a)
    this.keys[b] = k
    this.orders[b] = o
    this.items[b] = it
  }

  private up(i: number): void {
    while (i > 0) {
      const p = (i - 1) >> 1
      if (!this.less(i, p)) return
      this.swap(i, p)
      i = p
    }
  }

  private down(i: number): void {
    const n = this.items.length
    for (;;) {
      const l = 2 * i + 1, r = l + 1
      let m = i
      if (l < n && this.less(l, m)) m = l
      if (r < n && this.less(r, m)) m = r
      if (m === i) return
      this.swap(i, m)
      i = m
    }
  }
}

/**
 * A min-heap over the fixed items 0..n-1 whose keys change in place (decrease or increase):
 * the devices' next-completion times. Updating a key costs O(log n) and leaves no stale entry
 * behind, unlike pushing a new event each time a device's rate changes.
 */
export class IndexedMinHeap {
  private readonly keys: Float64Array
  private readonly heap: Int32Array
  private readonly pos: Int32Array

  constructor(n: number) {
    this.keys = new Float64Array(n).fill(Infinity)
    this.heap = Int32Array.from({ length: n }, (_, i) => i)
    this.pos = Int32Array.from({ length: n }, (_, i) => i)
  }

  minKey(): number {
    return this.heap.length > 0 ? this.keys[this.heap[0]!]! : Infinity
  }

  minItem(): number {
    return this.heap[0]!
  }

  set(item: number, key: number): void {
    const old = this.keys[item]!
    this.keys[item] = key
    if (key < old) this.up(this.pos[item]!)
    else if (key > old) this.down(this.pos[item]!)
  }

  private less(a: number, b: number): boolean {
    const ia = this.heap[a]!, ib = this.heap[b]!
    const ka = this.keys[ia]!, kb = this.keys[ib]!
    return ka < kb || (ka === kb && ia < ib)
  }

  private swap(a: number, b: number): void {
    const ia = this.heap[a]!, ib = this.heap[b]!
    this.heap[a] = ib
    this.heap[b] = ia
    this.pos[ib] = a
    this.pos[ia] = b
  }

  private up(i: number): void {
    while (i > 0) {
      const p = (i - 1) >> 1
      if (!this.less(i, p)) return
      this.swap(i, p)
      i = p
    }
  }

  private down(i: number): void {
    const n = this.heap.length
    for (;;) {
      const l = 2 * i + 1, r = l + 1
      let m = i
      if (l < n && this.less(l, m)) m = l
      if (r < n && this.less(r, m)) m = r
      if (m === i) return
      this.swap(i, m)
      i = m
    }
  }
}

/**
 * Events kept outside the queue's heap in their own typed structures (device completions,
 * harness timers): no closure per event, which is most of the garbage in a large run.
 */
export interface EventSource {
  nextTime(): number
  fire(): void
}

/** Discrete-event clock: `at(t, fn)` schedules, `run()` executes in time order until `stop()` or empty. */
export class EventQueue {
  private readonly heap = new MinHeap<() => void>()
  private readonly sources: Array<EventSource> = []
  private stopped = false
  now = 0
  events = 0

  /** Adds a source of events; at equal times the queue's own events go first, then sources in attach order. */
  attach(source: EventSource): void {
    this.sources.push(source)
  }

  at(time: number, fn: () => void): void {
    this.heap.push(Math.max(time, this.now), fn)
  }

  after(delay: number, fn: () => void): void {
    this.at(this.now + delay, fn)
  }

  stop(): void {
    this.stopped = true
    this.heap.clear()
  }

  /** Runs events until stopped, the queue empties or `maxEvents` is hit (a guard against a model bug looping forever). */
  run(maxEvents: number): void {
    while (!this.stopped) {
      let t = this.heap.peekKey()
      let from: EventSource | undefined
      for (const s of this.sources) {
        const ts = s.nextTime()
        if (ts < t) {
          t = ts
          from = s
        }
      }
      if (t === Infinity) return
      if (this.events++ >= maxEvents) throw new Error(`simulation exceeded ${maxEvents} events (a schedule that never finishes?)`)
      this.now = t
      if (from !== undefined) from.fire()
      else this.heap.pop()!()
    }
  }
}
