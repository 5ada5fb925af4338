/**
 * `reins rollouts list [--state --group --limit --json]` and `reins rollouts show ID [--tokens]
 * [--json]`: what the dashboard shows, against a running Gateway's admin API (`--url`, the admin
 * token from `REINS_ADMIN_TOKEN` or `--data DIR`). The token view is in ANSI colours on a
 * terminal (or with FORCE_COLOR; NO_COLOR turns them off).
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { failWith } from "./node.js"
import { adminToken, getJson, RolloutDetail, RolloutList, RolloutTokens } from "./rolloutsApi.js"
import { detailText, listTable, tokenText } from "./rolloutsFormat.js"

const url = Options.text("url").pipe(Options.withDefault("http://127.0.0.1:8000"), Options.withDescription("The Gateway's HTTP address."))
const data = Options.text("data").pipe(
  Options.withDefault(".reins"),
  Options.withDescription("The Gateway's data directory, whose admin-token to use (when REINS_ADMIN_TOKEN is not set).")
)
const json = Options.boolean("json").pipe(Options.withDescription("Print the admin API's JSON instead of text."))

const state = Options.choice("state", ["queued", "running", "succeeded", "failed", "cancelled"]).pipe(Options.optional, Options.withDescription("Only rollouts in this state."))
const group = Options.text("group").pipe(Options.optional, Options.withDescription("Only rollouts of this task group."))
const limit = Options.integer("limit").pipe(Options.withDefault(50), Options.withDescription("How many rollouts, newest first (1-500)."))

const list = Command.make("list", { url, data, json, state, group, limit }, (args) =>
  Effect.gen(function* () {
    if (args.limit < 1 || args.limit > 500) return yield* Effect.fail(new Error("--limit must be from 1 to 500"))
    const token = yield* adminToken(args.data)
    const q = new URLSearchParams({ limit: String(args.limit) })
    Option.map(args.state, (s) => q.set("state", s))
    Option.map(args.group, (g) => q.set("group", g))
    const { value, raw } = yield* getJson(args.url, token, `/api/rollouts?${q}`, RolloutList)
    yield* Console.log(args.json ? JSON.stringify(raw) : value.data.length === 0 ? "no rollouts" : listTable(value.data))
  }).pipe(failWith("reins rollouts list"))
).pipe(Command.withDescription("List rollouts, newest first: state, group, reward, attempts, calls, tokens, versions, duration, task."))

const id = Args.text({ name: "id" }).pipe(Args.withDescription("The rollout id (ro_...)."))
const tokens = Options.boolean("tokens").pipe(Options.withDescription("Also show every token of every segment, coloured by role and logprob."))

const useColor = () => process.env.NO_COLOR === undefined && (process.stdout.isTTY === true || (process.env.FORCE_COLOR ?? "0") !== "0")

const show = Command.make("show", { url, data, json, id, tokens }, (args) =>
  Effect.gen(function* () {
    const token = yield* adminToken(args.data)
    const path = `/api/rollouts/${encodeURIComponent(args.id)}`
    const detail = yield* getJson(args.url, token, path, RolloutDetail)
    const view = args.tokens ? Option.some(yield* getJson(args.url, token, `${path}/tokens`, RolloutTokens)) : Option.none()
    if (args.json) {
      yield* Console.log(JSON.stringify(Option.match(view, { onNone: () => detail.raw, onSome: (v) => ({ ...(detail.raw as object), tokens: v.raw }) })))
      return
    }
    yield* Console.log(detailText(detail.value))
    if (Option.isSome(view)) yield* Console.log("\n" + tokenText(view.value.value.segments, useColor()))
  }).pipe(failWith("reins rollouts show"))
).pipe(Command.withDescription("Show one rollout: attempts, calls, rewards; --tokens adds the token view."))

export const rollouts = Command.make("rollouts").pipe(
  Command.withDescription("Look at the rollouts a running Gateway recorded."),
  Command.withSubcommands([list, show])
)
