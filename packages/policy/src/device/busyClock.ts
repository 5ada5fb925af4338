/**
 * Where the device's time goes, for the Trainer's busy fractions: cumulative seconds generating
 * (at least one live sequence, not paused, not training) and training, since the device started.
 * Kept from state transitions (a generation starts or ends, a pause begins or ends, training
 * starts or ends), not by sampling.
 */
export class BusyClock {
  private readonly started = performance.now()
  private since = this.started
  private live = 0
  private paused = false
  private training = 0
  private generatingMs = 0
  private trainingMs = 0

  private get generating(): boolean {
    return this.live > 0 && !this.paused && this.training === 0
  }

  /** Adds the time since the last transition to the state that held during it. */
  private settle(): void {
    const now = performance.now()
    if (this.generating) this.generatingMs += now - this.since
    if (this.training > 0) this.trainingMs += now - this.since
    this.since = now
  }

  generationStarted(): void {
    this.settle()
    this.live++
  }

  generationEnded(): void {
    this.settle()
    this.live = Math.max(0, this.live - 1)
  }

  setPaused(paused: boolean): void {
    this.settle()
    this.paused = paused
  }

  trainingStarted(): void {
    this.settle()
    this.training++
  }

  trainingEnded(): void {
    this.settle()
    this.training = Math.max(0, this.training - 1)
  }

  read(): { readonly uptimeSeconds: number; readonly generatingSeconds: number; readonly trainingSeconds: number } {
    this.settle()
    return {
      uptimeSeconds: (this.since - this.started) / 1000,
      generatingSeconds: this.generatingMs / 1000,
      trainingSeconds: this.trainingMs / 1000
    }
  }
}
