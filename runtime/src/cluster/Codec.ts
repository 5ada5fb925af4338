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

export interface RpcCodec {
  readonly tag: string
  readonly isStream: boolean
  readonly encodePayload: Codec
  readonly decodePayload: Codec
  /** The success value of a non-stream rpc (the fast path of a reply). */
  readonly encodeSuccess: Codec
  readonly decodeSuccess: Codec
  /** A whole `Exit` (typed failures, defects...). */
  readonly encodeExit: Codec
  readonly decodeExit: Codec<Exit.Exit<unknown, unknown>>
  /** A chunk of a streamed reply. */
  readonly encodeChunk: Codec<ReadonlyArray<unknown>>
  readonly decodeChunk: Codec<ReadonlyArray<unknown>>
}

const cache = new WeakMap<object, RpcCodec>()

const either = (schema: Schema.Schema<any, any, any>, direction: "encode" | "decode"): Codec<any> => {
  const s = schema as Schema.Schema<any, any, never>
  return (direction === "encode" ? Schema.encodeUnknownEither(s) : Schema.decodeUnknownEither(s)) as Codec<any>
}

export const forRpc = (rpc: Rpc.Any): RpcCodec => {
  let codec = cache.get(rpc)
  if (codec !== undefined) return codec
  const props = rpc as unknown as Rpc.AnyWithProps
  const stream = RpcSchema.getStreamSchemas(props.successSchema.ast)
  const exit = Rpc.exitSchema(rpc as any) as Schema.Schema<any, any, never>
  const chunk = Schema.Array(Option.isSome(stream) ? stream.value.success : Schema.Any)
  codec = {
    tag: props._tag,
    isStream: Option.isSome(stream),
    encodePayload: either(props.payloadSchema as any, "encode"),
    decodePayload: either(props.payloadSchema as any, "decode"),
    encodeSuccess: either(props.successSchema, "encode"),
    decodeSuccess: either(props.successSchema, "decode"),
    encodeExit: either(exit, "encode"),
    decodeExit: either(exit, "decode"),
    encodeChunk: either(chunk, "encode"),
    decodeChunk: either(chunk, "decode")
  }
  cache.set(rpc, codec)
  return codec
}

export const encodeActorError = either(ActorError, "encode")
export const decodeActorError: Codec<ActorError> = either(ActorError, "decode")

/** A one-line description of a parse error (sent back to the caller). */
export const describe = (error: ParseResult.ParseError): string =>
  ParseResult.TreeFormatter.formatErrorSync(error).split("\n").slice(0, 6).join(" ")
