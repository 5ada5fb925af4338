// Types for agent.mjs (for TypeScript importers such as the tests and the SFT tooling).
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
  readonly function: { readonly name: string; readonly parameters: Record<string, unknown> }
}
export declare const SYSTEM_PROMPT: string
export declare const TOOLS: ReadonlyArray<Tool>
export declare const ANSWER_PREFIX: string
export declare const firstMessages: (question: string) => Array<Message>
export declare const assistantMessage: (content: string | null | undefined, toolCalls?: ReadonlyArray<ToolCall>) => Message
export declare const runToolCall: (call: unknown) => string
export declare const extractAnswer: (text: string | null | undefined) => string
