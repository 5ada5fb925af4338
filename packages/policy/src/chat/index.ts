export * from "./ChatTemplateError.js"
export { ChatTemplate, DEFAULT_CHAT_TEMPLATE, CHAT_TEMPLATE_FILE, type RenderOptions, type PreviousCall } from "./ChatTemplate.js"
export { loadChatTemplate, saveChatTemplate } from "./ChatTemplateFiles.js"
export type { PromptTemplate, PromptOptions } from "./PromptTemplate.js"
export { HfPromptTemplate } from "./HfPromptTemplate.js"
export { loadPromptTemplate, savePromptTemplate, type LoadPromptTemplateOptions } from "./PromptTemplateFiles.js"
export {
  parseToolCalls,
  TOOL_CALL_OPEN,
  TOOL_CALL_CLOSE,
  type ParsedToolCall,
  type ToolCallParseError
} from "./ToolCallParser.js"
export { HfChatTemplate, type HfTemplateSpec, type HfTemplateOptions, type HfRenderOptions, type SpecialTokenValues } from "./HfChatTemplate.js"
export {
  loadHfChatTemplate,
  hfTemplateSpec,
  TOKENIZER_CONFIG_FILE,
  HF_CHAT_TEMPLATE_FILE,
  ADDITIONAL_CHAT_TEMPLATES_DIR,
  type TemplateFiles
} from "./HfTemplateFiles.js"
export { templateMessages, templateTools, type TemplateMessageInput, type ToolArgumentsForm } from "./templateMessages.js"
export { strftime } from "./strftime.js"
export type { ParsedOutput, OutputParseOptions } from "./ParsedOutput.js"
export { parseLlama3JsonToolCalls, PYTHON_TAG } from "./LlamaToolParser.js"
export { parseMistralToolCalls, mistralCallIds, TOOL_CALLS_TOKEN } from "./MistralToolParser.js"
export { parseThinking, THINK_OPEN, THINK_CLOSE } from "./ReasoningParser.js"
export {
  parseOutput,
  toolParsers,
  reasoningParsers,
  TOOL_PARSERS,
  REASONING_PARSERS,
  ToolParserName,
  ReasoningParserName,
  OutputParsersConfig,
  type OutputParsers,
  type OutputParser,
  type ParseOutputOptions
} from "./OutputParsers.js"
export { detectOutputParsers, type DetectedParsers } from "./ParserDetection.js"
