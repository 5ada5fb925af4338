// Types for tasks.mjs (for TypeScript importers such as the tests).
export interface CalcTask {
  readonly id: string
  readonly input: { readonly question: string }
  readonly split: "train" | "test"
  readonly answer: number
  readonly expression: string
}
export interface TaskOptions {
  readonly seed?: number
  readonly train?: number
  readonly test?: number
  /** Fraction of word problems, 0..1. */
  readonly word?: number
}
export declare const DEFAULTS: Required<TaskOptions>
export declare const generateTasks: (options?: TaskOptions) => { train: Array<CalcTask>; test: Array<CalcTask> }
export declare const toJsonl: (rows: ReadonlyArray<unknown>) => string
