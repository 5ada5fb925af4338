export * from "./ChatTemplateError.js"
export { ChatTemplate, DEFAULT_CHAT_TEMPLATE, CHAT_TEMPLATE_FILE, type RenderOptions, type PreviousCall } from "./ChatTemplate.js"
export { loadChatTemplate, saveChatTemplate } from "./ChatTemplateFiles.js"
export {
  parseToolCalls,
  TOOL_CALL_OPEN,
  TOOL_CALL_CLOSE,
  type ParsedToolCall,
  type ToolCallParseError,
  type ParsedAssistantText,
  type ParseToolCallsOptions
} from "./ToolCallParser.js"
