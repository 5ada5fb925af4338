/**
 * `@reins/policy/text`: the tokenizer, chat template and tool-call parser alone. Processes that
 * only handle text (the Gateway, the CLI) import this and never load TensorFlow.js.
 */
export * from "./tokenizer/index.js"
export * from "./chat/index.js"
