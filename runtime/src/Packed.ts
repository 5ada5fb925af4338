/**
 * Typed arrays as packed bytes. Token ids and logprobs cross the wire as msgpack `bin` (the raw
 * little-endian bytes of an Int32Array / Float32Array), never as `number[]` through Schema:
 * measured 7–12× slower that way. The decoded side is the typed array itself.
 */
import { ParseResult, Schema } from "effect"

const bytesOf = (a: Int32Array | Float32Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)

/**
 * An owned, aligned copy of the bytes. Not `bytes.slice()`: msgpackr decodes `bin` as a Node
 * `Buffer` view into the whole frame (or the 8 KiB pool), and `Buffer#slice` does not copy.
 */
const ownedBuffer = (bytes: Uint8Array): ArrayBuffer => new Uint8Array(bytes).buffer

const packed = <A extends Int32Array | Float32Array>(
  name: string,
  ctor: { new (buffer: ArrayBuffer): A; readonly BYTES_PER_ELEMENT: number },
  is: (u: unknown) => u is A
) =>
  Schema.transformOrFail(Schema.Uint8ArrayFromSelf, Schema.declare(is, { identifier: name }), {
    strict: true,
    decode: (bytes, _, ast) =>
      bytes.byteLength % ctor.BYTES_PER_ELEMENT === 0
        ? ParseResult.succeed(new ctor(ownedBuffer(bytes)))
        : ParseResult.fail(new ParseResult.Type(ast, bytes, `${name}: ${bytes.byteLength} bytes is not a multiple of ${ctor.BYTES_PER_ELEMENT}`)),
    encode: (a) => ParseResult.succeed(bytesOf(a))
  }).annotations({ identifier: `Packed${name}` })

/** An Int32Array that travels as its bytes. */
export const Int32 = packed("Int32Array", Int32Array, (u): u is Int32Array => u instanceof Int32Array)
/** A Float32Array that travels as its bytes. */
export const Float32 = packed("Float32Array", Float32Array, (u): u is Float32Array => u instanceof Float32Array)
