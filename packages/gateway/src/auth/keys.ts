/**
 * Attempt keys: 192 random bits, handed to the harness as its `OPENAI_API_KEY`. The store keeps
 * only the SHA-256 of a key, so a leaked database does not leak live keys.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"

const PREFIX = "rk-"

export const generateKey = (): string => PREFIX + randomBytes(24).toString("base64url")

export const hashKey = (key: string): string => createHash("sha256").update(key, "utf8").digest("hex")

/** Constant-time comparison of two secrets. */
export const secretsEqual = (a: string, b: string): boolean => {
  const x = createHash("sha256").update(a).digest()
  const y = createHash("sha256").update(b).digest()
  return timingSafeEqual(x, y)
}
