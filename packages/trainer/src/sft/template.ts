/**
 * The compact chat template new SFT policies get (compact_chat_template.jinja beside this file):
 * ChatML turns like the default template, tools as one short signature line each and tool results
 * without a wrapper, so a calc conversation fits a tiny model's context. Tool calls are written
 * exactly as the default template writes them, which is what the Gateway's parser reads.
 */
import { ChatTemplate } from "@reins/policy/text"
import { readFileSync } from "node:fs"

export const COMPACT_CHAT_TEMPLATE: string = readFileSync(new URL("./compact_chat_template.jinja", import.meta.url), "utf8")

let compact: ChatTemplate | undefined

/** The compact template, parsed and checked once. */
export const compactChatTemplate = (): ChatTemplate => (compact ??= ChatTemplate.fromString(COMPACT_CHAT_TEMPLATE))
