/**
 * Supervised fine-tuning data: demo transcripts (JSONL of OpenAI chat conversations) → training
 * sequences with loss weight on exactly the tokens the model would have generated, a tokenizer
 * learned from the demos (digits stay single tokens), the compact chat template for tiny models,
 * the step plan, and the training loop `reins sft` runs (`trainSft`); see README.md in this folder.
 */
export { Demo, DemoError, parseDemoLine, parseDemos, readDemos, type DemoLine, type ParsedDemos, type ParseDemosOptions, type SkippedLine } from "./demos.js"
export { COMPACT_CHAT_TEMPLATE, compactChatTemplate } from "./template.js"
export { demoCorpus, trainBpeSingleDigits, trainDemoTokenizer, type DemoTokenizerOptions } from "./tokenizer.js"
export {
  assistantOutputIds,
  buildSequences,
  demoSequence,
  type BuiltSequences,
  type DroppedDemo,
  type PromptFormat as SftPromptFormat,
  type SftSequence
} from "./sequences.js"
export { planSteps, stepsForEpochs, tokenNormalized, type PlanOptions } from "./plan.js"
export { SftError, trainSft, type SftResult, type SftSettings } from "./train.js"
