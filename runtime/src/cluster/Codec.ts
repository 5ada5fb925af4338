/**
 * Schema encoders/decoders of one `Rpc` for the wire, built once per rpc. They are the same
 * schemas `RpcClient`/`RpcServer` use (payload, success, `Rpc.exitSchema`, stream chunks), run
 * synchronously (`Either`) because nothing in a protocol schema is asynchronous and a fiber per
 * message would cost more than the message. Protocol schemas must not require services.
 */
import * as Rpc from "@effect/rpc/Rpc"
import * as RpcSchema from "@effect/rpc/RpcSchema"
import { type Either, type Exit, Option, ParseResult, Schema } from "effect"
import { ActorError } from "../errors.js"

type Codec<A = unknown> = (u: unknown) => Either.Either<A, ParseResult.ParseError>

const either = <A = unknown>(schema: Schema.Schema<any, any, any>, direction: "encode" | "decode"): Codec<A> => {
  const s = schema as Schema.Schema<any, any, never>
  return (direction === "encode" ? Schema.encodeUnknownEither(s) : Schema.decodeUnknownEither(s)) as Codec<A>
}

const build = (rpc: Rpc.Any) => {
  const props = rpc as unknown as Rpc.AnyWithProps
  const stream = RpcSchema.getStreamSchemas(props.successSchema.ast)
  const exit = Rpc.exitSchema(rpc as any) as Schema.Schema<any, any, never>
  const chunk = Schema.Array(Option.isSome(stream) ? stream.value.success : Schema.Any)
  return {
    tag: props._tag,
    isStream: Option.isSome(stream),
    encodePayload: either(props.payloadSchema as any, "encode"),
    decodePayload: either(props.payloadSchema as any, "decode"),
    /** The success value of a non-stream rpc (the fast path of a reply). */
    encodeSuccess: either(props.successSchema, "encode"),
    decodeSuccess: either(props.successSchema, "decode"),
    /** A whole `Exit` (typed failures, defects...). */
    encodeExit: either(exit, "encode"),
    decodeExit: either<Exit.Exit<unknown, unknown>>(exit, "decode"),
    /** A chunk of a streamed reply. */
    encodeChunk: either<ReadonlyArray<unknown>>(chunk, "encode"),
    decodeChunk: either<ReadonlyArray<unknown>>(chunk, "decode")
  } as const
}

export type RpcCodec = ReturnType<typeof build>

const cache = new WeakMap<object, RpcCodec>()

export const forRpc = (rpc: Rpc.Any): RpcCodec => {
  const codec = cache.get(rpc) ?? build(rpc)
  cache.set(rpc, codec)
  return codec
}

export const encodeActorError = either(ActorError, "encode")
export const decodeActorError: Codec<ActorError> = either(ActorError, "decode")

/** A one-line description of a parse error (sent back to the caller). */
export const describe = (error: ParseResult.ParseError): string =>
  ParseResult.TreeFormatter.formatErrorSync(error).split("\n").slice(0, 6).join(" ")
