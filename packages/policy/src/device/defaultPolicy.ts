/**
 * The project's small default policy, created on first use when no trained checkpoint exists:
 * a 512-token byte-level BPE learned from a fixed text (so every machine creates the same one)
 * and a freshly initialised model with a fixed seed.
 */
import type { Effect } from "effect"
import { ChatTemplate } from "../chat/ChatTemplate.js"
import type { CheckpointError, ModelDir } from "../checkpoint/modelDir.js"
import { ensureModelDir } from "../model/defaults.js"
import type { Tokenizer } from "../tokenizer/Tokenizer.js"
import { trainBpe } from "../tokenizer/BpeTrainer.js"

/** The id the default policy is served under. */
export const DEFAULT_MODEL_ID = "reins-default"

/** The default tokenizer, learned from the chat template's rendering of a tool-using conversation. */
export const defaultTokenizer = (): Tokenizer => {
  const sample = ChatTemplate.default().render(
    [
      { role: "system", content: "You are a helpful assistant. Answer briefly and call tools when they help." },
      { role: "user", content: "What is the weather in Paris today? Please check." },
      {
        role: "assistant",
        content: "Let me check.",
        tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }]
      },
      { role: "tool", tool_call_id: "call_1", content: '{"temperature": 21, "sky": "clear"}' },
      { role: "assistant", content: "It is 21 degrees and clear in Paris." }
    ],
    {
      tools: [{
        type: "function",
        function: {
          name: "get_weather",
          description: "Current weather of a city",
          parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
        }
      }]
    }
  )
  const prose = "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) [ ] { } < > , . ; : ! ? ' \" \n"
  return trainBpe([sample, prose].join("\n").repeat(4), { vocabSize: 512 })
}

/** Loads the default policy from `dir`, creating it there first if it does not exist yet. */
export const ensureDefaultPolicy = (dir: string): Effect.Effect<ModelDir, CheckpointError> =>
  ensureModelDir(dir, { tokenizer: defaultTokenizer() })
