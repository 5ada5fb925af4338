/**
 * A checkpoint's checksum (checksum.ts) computed on a worker thread (checksumWorker.mjs) over
 * bytes this thread has read into shared buffers: loading a large checkpoint so verifies it on a
 * second core while the loader converts and places the weights, instead of hashing every chunk on
 * the loader's own thread. No byte is copied or read twice: the thread hashes a buffer while the
 * loader reads from it too, and hands it back when done. The thread takes ~35 ms to start here:
 * a CRC-32 reader hashes the first chunks itself meanwhile and hands its running value over
 * (`continueFrom`) once the thread says it is `ready`.
 */
import { Worker } from "node:worker_threads"
import type { ChecksumAlgorithm } from "./checksum.js"

export class ChecksumThread {
  /** Per slot: settles once the thread is done with what was last handed to it there. */
  private readonly busy: Array<Promise<void>>
  private readonly release: Array<() => void> = []
  /** Per slot: whether the thread holds it now (the synchronous twin of `busy`). */
  private readonly held: Array<boolean>
  private failure: Error | undefined
  /** Whether the thread has started (and said so): handing work to it no longer waits on its start. */
  ready = false
  private finish: { resolve: (hex: string) => void; reject: (e: Error) => void } | undefined

  private constructor(
    private readonly worker: Worker,
    /** The shared buffers to read into, each of the size `start` was given. */
    readonly slots: ReadonlyArray<Uint8Array>
  ) {
    this.busy = slots.map(() => Promise.resolve())
    this.held = slots.map(() => false)
    worker.on("message", (m: { free?: number; digest?: string; ready?: boolean }) => {
      if (m.ready === true) this.ready = true
      if (m.free !== undefined) {
        this.held[m.free] = false
        this.release[m.free]?.()
      }
      if (m.digest !== undefined) this.finish?.resolve(m.digest)
    })
    const fail = (e: Error) => {
      this.failure ??= e
      this.held.fill(false)
      for (const release of this.release) release() // nothing waits forever on a dead thread
      this.finish?.reject(this.failure)
    }
    worker.once("error", fail)
    worker.once("exit", (code) => fail(new Error(`the checksum thread exited with code ${code}`)))
  }

  /** A thread with `slots` buffers of `slotBytes`; undefined where none can start (then the caller hashes). */
  static tryStart(algorithm: ChecksumAlgorithm, slots: number, slotBytes: number): ChecksumThread | undefined {
    try {
      const shared = Array.from({ length: slots }, () => new SharedArrayBuffer(slotBytes))
      // No inherited flags: the worker is plain JavaScript on node's built-ins, and a TypeScript
      // loader (tsx's --import) would load in it too — ready in ~90–180 ms here instead of ~35.
      const worker = new Worker(new URL("./checksumWorker.mjs", import.meta.url), { workerData: { algorithm, slots: shared }, execArgv: [] })
      return new ChecksumThread(worker, shared.map((s) => new Uint8Array(s)))
    } catch {
      return undefined
    }
  }

  /** Settles once slot `k` may be overwritten. */
  free(k: number): Promise<void> {
    return this.busy[k]!
  }

  /** Whether slot `k` may be overwritten now. */
  isFree(k: number): boolean {
    return !this.held[k]
  }

  /**
   * A CRC-32 thread: what it hashes from now on continues the checksum `hex` (the CRC-32 of the
   * bytes before, hashed elsewhere), as zlib's `crc32(bytes, value)` continues one. Before any `update`.
   */
  continueFrom(hex: string): void {
    if (this.failure === undefined) this.worker.postMessage({ seed: Number.parseInt(hex, 16) })
  }

  /** Hashes the first `length` bytes of slot `k` next (after everything handed over before). */
  update(k: number, length: number): void {
    if (this.failure !== undefined) return
    this.held[k] = true
    this.busy[k] = new Promise((resolve) => (this.release[k] = resolve))
    this.worker.postMessage({ slot: k, length })
  }

  /** The hex digest of everything handed over; rejects if the thread failed. */
  digest(): Promise<string> {
    if (this.failure !== undefined) return Promise.reject(this.failure)
    const hex = new Promise<string>((resolve, reject) => (this.finish = { resolve, reject }))
    this.worker.postMessage({ digest: true })
    return hex
  }

  /** Ends the thread, wherever it is. */
  async stop(): Promise<void> {
    await this.worker.terminate()
  }
}
