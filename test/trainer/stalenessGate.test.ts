/**
 * The staleness bound's two rules in isolation (the schedules test checks them end to end):
 * admission keeps at most consumed + (max_staleness + 1) × batch_groups groups admitted, and an
 * update waits for a running group that would otherwise outlive the bound, taking the oldest
 * groups first.
 */
import { describe, expect, it } from "vitest"
import { type GroupState, StalenessGate } from "@reins/trainer"

const group = (groupId: string, seq: number, finished: boolean): GroupState => ({ groupId, seq, finished, startVersion: null })

describe("StalenessGate", () => {
  it("admits new groups within the budget only; an admitted group's further rollouts always", () => {
    const gate = new StalenessGate(2, 1)
    expect(gate.budget).toBe(4)
    for (const id of ["a", "b", "c", "d"]) expect(gate.admit(id, 0)).toBe(true)
    expect(gate.admit("e", 0)).toBe(false)
    expect(gate.admit("a", 1)).toBe(true) // a retry or another rollout of an admitted group
    expect(gate.startVersion("a")).toBe(0) // ... keeps the group's start version
    gate.consume(["a", "b"])
    expect(gate.consumedGroups).toBe(2)
    expect(gate.budget).toBe(6)
    expect(gate.admit("e", 1)).toBe(true)
    expect(gate.admit("f", 1)).toBe(true)
    expect(gate.admit("g", 1)).toBe(false)
  })

  it("waits for a running group that is due, and trains due groups first", () => {
    const gate = new StalenessGate(2, 1)
    gate.admit("old", 0)
    gate.admit("mid", 1)
    gate.admit("new", 1)
    gate.admit("newer", 1)
    // Update 1 must take "old" (started at 0, bound 1): while it runs, the update waits ...
    expect(gate.isDue("old", 1)).toBe(true)
    expect(gate.isDue("mid", 1)).toBe(false)
    expect(gate.select([group("old", 0, false), group("mid", 1, true), group("new", 2, true)], 1)).toBeNull()
    // ... and once it finished, it comes first, topped up with the oldest finished group.
    const batch = gate.select([group("old", 0, true), group("newer", 3, true), group("mid", 1, true), group("new", 2, true)], 1)
    expect(batch).toEqual(["old", "mid"])
  })

  it("takes every due group even beyond the batch size, and waits for a full batch unless flushing", () => {
    const gate = new StalenessGate(1, 1)
    gate.admit("a", 0)
    gate.admit("b", 0)
    // Update 0 trains one group; had it not happened, update 1 must take both.
    expect(gate.select([group("a", 0, true), group("b", 1, true)], 0)).toEqual(["a"])
    expect(gate.select([group("a", 0, true), group("b", 1, true)], 1)).toEqual(["a", "b"])
    const fresh = new StalenessGate(2, 1)
    fresh.admit("a", 0)
    expect(fresh.select([group("a", 0, true)], 0)).toBeNull()
    expect(fresh.select([group("a", 0, true)], 0, true)).toEqual(["a"])
    expect(fresh.select([], 0, true)).toBeNull()
  })

  it("restores the consumed count after a restart with nothing running", () => {
    const gate = new StalenessGate(2, 1)
    gate.admit("a", 0)
    gate.restore(8)
    expect(gate.consumedGroups).toBe(8)
    expect(gate.startVersion("a")).toBeNull()
    expect(gate.budget).toBe(12)
    for (const id of ["w", "x", "y", "z"]) expect(gate.admit(id, 4)).toBe(true)
    expect(gate.admit("over", 4)).toBe(false)
  })
})
