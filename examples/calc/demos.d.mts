// Types for demos.mjs (for TypeScript importers such as the tests).
import type { Message, Tool } from "./agent.mjs"
import type { CalcTask } from "./tasks.mjs"
export type DemoKind = "direct" | "wrong-expression" | "miscopy" | "correct"
export interface DemoOptions {
  readonly n?: number
  readonly seed?: number
  readonly direct?: number
  readonly wrongExpression?: number
  readonly miscopy?: number
  /** `phrase` (default): a direct guess reads "It is N."; `bare`: just the number. */
  readonly directStyle?: "phrase" | "bare"
}
export interface Demo {
  readonly kind: DemoKind
  readonly messages: ReadonlyArray<Message>
  readonly tools: ReadonlyArray<Tool>
}
export declare const DEMO_DEFAULTS: Required<Omit<DemoOptions, "directStyle">>
export declare const KINDS: ReadonlyArray<DemoKind>
export declare const makeDemos: (tasks: ReadonlyArray<CalcTask>, options?: DemoOptions) => Array<Demo>
