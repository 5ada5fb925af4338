/**
 * A size-capped log file fed from a stream. The cap is enforced while streaming: bytes beyond it
 * are counted and dropped (never buffered), and a one-line marker is written where the cut
 * happened, so a harness printing gigabytes costs at most `maxBytes` of disk and memory. The
 * source is always drained — a child blocked on a full pipe would never exit.
 *
 * Writes are synchronous: at most `maxBytes` per log ever reach the file, in pipe-sized chunks,
 * to a local data directory, which is cheaper than a WriteStream's machinery per attempt (launch
 * overhead is dominated by such fixed costs) and keeps the file complete the moment the child's
 * pipes close.
 */
import { LogCapture } from "@reins/protocol"
import { closeSync, openSync, writeSync } from "node:fs"
import type { Readable } from "node:stream"

export const truncationMarker = (maxBytes: number) => `\n[reins: log truncated at ${maxBytes} bytes; the rest was dropped]\n`

export class CappedLog {
  private written = 0
  private dropped = 0
  private fd: number | null

  constructor(
    readonly path: string,
    private readonly maxBytes: number
  ) {
    this.fd = openSync(path, "w")
  }

  write(chunk: Buffer): void {
    const part = chunk.subarray(0, Math.max(0, this.maxBytes - this.written))
    this.dropped += chunk.length - part.length
    if (part.length === 0) return
    this.append(part)
    this.written += part.length
    if (part.length < chunk.length) this.append(Buffer.from(truncationMarker(this.maxBytes)))
  }

  follow(source: Readable): void {
    source.on("data", (chunk: Buffer) => this.write(chunk))
    source.on("error", () => {}) // EPIPE/ECONNRESET on a killed child: the log simply ends
  }

  /** Closes the file; what was captured. Idempotent. */
  close(): LogCapture {
    if (this.fd !== null) {
      try {
        closeSync(this.fd)
      } catch {
        // already closed by a failed write
      }
      this.fd = null
    }
    return new LogCapture({ path: this.path, bytes: this.written, droppedBytes: this.dropped })
  }

  private append(buf: Buffer): void {
    if (this.fd === null) return
    try {
      let off = 0
      while (off < buf.length) off += writeSync(this.fd, buf, off, buf.length - off)
    } catch {
      // A write error (disk full) must not crash the node; the capture just stops growing.
      try {
        closeSync(this.fd)
      } catch {
        // ignore
      }
      this.fd = null
    }
  }
}

/** Writes a whole text (e.g. a pod log fetched after the fact) under the same cap rules. */
export const writeCappedLog = (path: string, content: Buffer | string, maxBytes: number): LogCapture => {
  const log = new CappedLog(path, maxBytes)
  log.write(typeof content === "string" ? Buffer.from(content) : content)
  return log.close()
}
