#!/usr/bin/env node
/**
 * `--reward shaped` for the calc harness: the calc verifier's own code decides (imported, so one
 * Node process per rollout, not two: on this CPU-bound machine a process start costs as much as
 * the harness's work); a right answer scores 1 as before. A wrong answer scores partial credit for
 * being close instead of 0:
 *
 *   0.5 × max(0, 1 − |answer − reference| / max(10, |reference|))      (no number: 0)
 *
 * so a weak base policy, which rarely answers exactly, still has reward variance within its
 * groups and the Trainer has something to learn from (with 0/1 rewards every such group has zero
 * variance and its update is skipped). pass@1 is unchanged: it counts rewards >= 1, i.e. exact
 * answers only. A task the verifier cannot score stays an error (exit 2), as with the verifier.
 */
import { isCorrect, verifierInputs } from "../../examples/calc/verify.mjs"

const { expected, given } = verifierInputs()
const number = given === null || !/\d/.test(given) ? NaN : Number(given)
const reward = isCorrect(given, expected)
  ? 1
  : Number.isFinite(number)
  ? 0.5 * Math.max(0, 1 - Math.abs(number - expected) / Math.max(10, Math.abs(expected)))
  : 0
process.stdout.write(`${Number(reward.toFixed(4))}\n`)
