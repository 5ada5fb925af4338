// Types for tasks.mjs (for TypeScript importers such as the tests).
export interface NamePool {
  readonly verbs: ReadonlyArray<string>
  readonly nouns: ReadonlyArray<string>
  readonly helpers: ReadonlyArray<string>
  readonly constants: ReadonlyArray<number>
}
export declare const widePool: (seed: number) => NamePool
export declare const FAMILIES: ReadonlyArray<string>
export declare const HELD_OUT: ReadonlyArray<readonly [string, string]>
export declare const TEMPLATE_NAMES: ReadonlyArray<string>
export declare const COMBOS: ReadonlyArray<{ readonly template: string; readonly family: string; readonly heldOut: boolean }>
export declare const renderTestFile: (fn: string, source: string, cases: ReadonlyArray<readonly [string, unknown]>) => string
export declare const generateTasks: (options?: {
  readonly split?: "train" | "test"
  readonly n?: number
  readonly seed?: number
  readonly heldOutFraction?: number
  readonly pool?: "standard" | "wide"
}) => Array<Record<string, unknown>>
