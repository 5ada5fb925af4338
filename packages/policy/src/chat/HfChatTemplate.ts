/**
 * A Hugging Face model's chat template(s), rendered with `@huggingface/jinja` in the context
 * `transformers`' `apply_chat_template` builds, so a prompt is the text the model was trained on:
 *
 *   messages               the conversation (normalized as in templateMessages.ts)
 *   tools                  `[{type: "function", function: {...}}]`, or none (`null`) when the
 *                          request has no tools (an empty list counts as none)
 *   documents              none
 *   add_generation_prompt  whether to open the assistant's turn
 *   bos_token, eos_token, unk_token, pad_token, … additional_special_tokens
 *                          from tokenizer_config.json (a null token is left undefined)
 *   raise_exception(msg)   throws `ChatTemplateRaised` (the template refused the conversation)
 *   strftime_now(fmt)      the current time (injectable clock; C-locale names)
 *   …chat_template_kwargs  the request's extra variables (Qwen3's `enable_thinking`); they may
 *                          override special tokens, not the variables above
 *
 * Which template: a model has one (named "default") or several by name. As `transformers`
 * picks: the name asked for; else `tool_use` when the request has tools and the model has one;
 * else `default`; else it is an error.
 *
 * Unlike `ChatTemplate` (reins's own ChatML), nothing is assumed about the template's shape: real
 * templates rewrite history (Qwen3 drops reasoning of earlier user turns and groups tool
 * results), so prefix reuse of token ids must be checked by comparing renders, not assumed.
 */
import { Environment, Interpreter, Template } from "@huggingface/jinja"
import type { ChatTool } from "@reins/protocol"
import { ChatTemplateError, ChatTemplateRaised } from "./ChatTemplateError.js"
import { mapStrings } from "./MarkerEscape.js"
import type { PromptOptions } from "./PromptTemplate.js"
import { strftime } from "./strftime.js"
import { templateMessages, templateTools, type TemplateMessageInput, type ToolArgumentsForm } from "./templateMessages.js"

export type SpecialTokenValues = Readonly<Record<string, string | ReadonlyArray<string>>>

export interface HfTemplateSpec {
  /** Template sources by name; a model's single `chat_template` string is "default". */
  readonly templates: Readonly<Record<string, string>>
  /** The special-token variables (`bos_token`, `eos_token`, …, `additional_special_tokens`). */
  readonly specialTokens?: SpecialTokenValues | undefined
  /** Where the templates came from (a file or directory), for error messages. */
  readonly origin?: string | undefined
}

export interface HfTemplateOptions {
  /** The clock behind `strftime_now` (default: the system clock). */
  readonly now?: (() => Date) | undefined
}

export interface HfRenderOptions extends PromptOptions {
  /** A template by name instead of the default choice. */
  readonly templateName?: string | undefined
  /** Tool-call arguments as parsed objects (default, as transformers expects) or the client's text. */
  readonly toolArguments?: ToolArgumentsForm | undefined
  /**
   * Applied to every string of the messages and tools before rendering (e.g. the control-token
   * escaper of MarkerEscape.ts, so text that spells `<|im_end|>` never becomes the token).
   */
  readonly escape?: ((text: string) => string) | undefined
}

/** Variables the render context owns; a kwarg of the same name is refused, as in transformers. */
const RESERVED = new Set(["messages", "tools", "documents", "add_generation_prompt", "raise_exception", "strftime_now"])

/** What `raise_exception` throws inside the interpreter, told apart from the template's own bugs. */
class Raised extends Error {}

const describe = (e: unknown) => (e instanceof Error ? e.message : String(e))

/** Python's `range(stop)` / `range(start, stop[, step])`. */
const range = (start: number, stop?: number, step = 1): Array<number> => {
  const [from, to] = stop === undefined ? [0, start] : [start, stop]
  if (step === 0) throw new Error("range() step must not be zero")
  const out: Array<number> = []
  for (let i = from; step > 0 ? i < to : i > to; i += step) out.push(i)
  return out
}

/**
 * The globals `@huggingface/jinja`'s own `Template.render` declares, with reins's
 * `raise_exception` and `strftime_now` in place of its (a render cannot redeclare them).
 */
const globals = (now: () => Date): Environment => {
  const env = new Environment()
  const values: Record<string, unknown> = {
    false: false,
    true: true,
    none: null,
    False: false,
    True: true,
    None: null,
    range,
    raise_exception: (message: unknown) => {
      throw new Raised(String(message))
    },
    strftime_now: (format: unknown) => strftime(now(), String(format))
  }
  for (const [k, v] of Object.entries(values)) env.set(k, v)
  return env
}

export class HfChatTemplate {
  readonly names: ReadonlyArray<string>
  readonly specialTokens: SpecialTokenValues
  readonly origin: string

  private constructor(
    private readonly parsed: ReadonlyMap<string, { readonly source: string; readonly template: Template }>,
    specialTokens: SpecialTokenValues,
    origin: string,
    private readonly now: () => Date
  ) {
    this.names = [...parsed.keys()]
    this.specialTokens = specialTokens
    this.origin = origin
  }

  /** Parses every template. Throws `ChatTemplateError` naming the one that does not parse. */
  static make(spec: HfTemplateSpec, options?: HfTemplateOptions): HfChatTemplate {
    const origin = spec.origin ?? "chat template"
    const parsed = new Map<string, { source: string; template: Template }>()
    for (const [name, source] of Object.entries(spec.templates)) {
      try {
        parsed.set(name, { source, template: new Template(source) })
      } catch (e) {
        throw new ChatTemplateError({ message: `${origin}: chat template "${name}" does not parse: ${describe(e)}`, cause: e })
      }
    }
    if (parsed.size === 0) throw new ChatTemplateError({ message: `${origin}: no chat template` })
    return new HfChatTemplate(parsed, spec.specialTokens ?? {}, origin, options?.now ?? (() => new Date()))
  }

  /** The source of a template (the default choice for a request without tools if unnamed). */
  source(name?: string): string {
    return this.parsed.get(name ?? this.select(undefined))!.source
  }

  /** All sources, for parser detection. */
  sources(): ReadonlyArray<string> {
    return [...this.parsed.values()].map((p) => p.source)
  }

  /** The name of the template a request renders with (see the module comment). */
  select(tools: ReadonlyArray<ChatTool> | undefined, templateName?: string): string {
    if (templateName !== undefined) {
      if (this.parsed.has(templateName)) return templateName
      throw new ChatTemplateError({ message: `${this.origin}: no chat template named "${templateName}" (it has ${this.names.map((n) => `"${n}"`).join(", ")})` })
    }
    if (tools !== undefined && tools.length > 0 && this.parsed.has("tool_use")) return "tool_use"
    if (this.parsed.has("default")) return "default"
    throw new ChatTemplateError({
      message: `${this.origin}: the model has several chat templates (${this.names.map((n) => `"${n}"`).join(", ")}) and none is named "default"; name one for this request`
    })
  }

  /** The prompt text. Throws `ChatTemplateError`, or `ChatTemplateRaised` when the template refuses. */
  render(messages: ReadonlyArray<TemplateMessageInput>, options?: HfRenderOptions): string {
    const name = this.select(options?.tools, options?.templateName)
    const kwargs = options?.chatTemplateKwargs ?? {}
    const reserved = Object.keys(kwargs).filter((k) => RESERVED.has(k))
    if (reserved.length > 0) {
      throw new ChatTemplateError({ message: `chat_template_kwargs cannot set ${reserved.join(", ")}: the chat template gets ${reserved.length === 1 ? "it" : "them"} from the request itself` })
    }
    let msgs: unknown = templateMessages(messages, options?.toolArguments)
    let tools: unknown = templateTools(options?.tools)
    const escape = options?.escape
    if (escape !== undefined) {
      msgs = mapStrings(msgs, escape)
      tools = mapStrings(tools, escape)
    }
    try {
      // The request's variables live in a scope of their own above the globals.
      const scope = new Environment(globals(this.now))
      const context = { ...this.specialTokens, ...kwargs, messages: msgs, tools, documents: null, add_generation_prompt: options?.addGenerationPrompt ?? false }
      for (const [k, v] of Object.entries(context)) scope.set(k, v)
      return new Interpreter(scope).run(this.parsed.get(name)!.template.parsed).value as string
    } catch (e) {
      if (e instanceof Raised) {
        throw new ChatTemplateRaised({ message: `${this.origin}: chat template "${name}" refused the conversation: ${e.message}`, templateMessage: e.message, template: name })
      }
      throw new ChatTemplateError({ message: `${this.origin}: chat template "${name}" failed to render: ${describe(e)}`, cause: e })
    }
  }
}
