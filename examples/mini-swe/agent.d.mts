// Types for agent.mjs (for TypeScript importers such as the tests).
export interface ToolCall {
  readonly id: string
  readonly type: "function"
  readonly function: { readonly name: string; readonly arguments: string }
}
export type Message =
  | { readonly role: "system" | "user"; readonly content: string }
  | { readonly role: "assistant"; readonly content: string | null; readonly tool_calls?: ReadonlyArray<ToolCall> }
  | { readonly role: "tool"; readonly tool_call_id: string; readonly content: string }
export interface Tool {
  readonly type: "function"
  readonly function: { readonly name: string; readonly parameters?: Record<string, unknown> }
}
export interface TaskInput {
  readonly issue?: string
  readonly files: Readonly<Record<string, string>>
}
export interface TestRun {
  readonly passed: number
  readonly failed: number
  readonly summary: string
  readonly exitCode?: number | null
}
export declare const SYSTEM_PROMPT: string
export declare const TOOLS: ReadonlyArray<Tool>
export declare const RESULT_PREFIX: string
export declare const MAX_READ_CHARS: number
export declare const MAX_TEST_SUMMARY_CHARS: number
export declare const isTestPath: (path: string) => boolean
export declare const isPackagePath: (path: unknown) => boolean
export declare const packageFiles: (input: unknown) => Record<string, string>
export declare const firstMessages: (input: TaskInput) => Array<Message>
export declare const assistantMessage: (content: string | null | undefined, toolCalls?: ReadonlyArray<ToolCall>) => Message
export declare const summarizeTap: (tap: string) => { passed: number; failed: number; summary: string }
export declare const runNodeTests: (dir: string, testFiles: ReadonlyArray<string>, options?: { timeoutMs?: number }) => Promise<TestRun>
