export * from "./tokenizer/index.js"
export * from "./chat/index.js"
