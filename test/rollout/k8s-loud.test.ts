/**
 * A cluster that cannot run any Job fails loudly, end to end: `reins node --roles rollout` with
 * the Kubernetes launcher (against the API-server double), and `reins train --join …
 * --no-local-rollouts` whose every attempt fails for the same infrastructure reason. The run
 * stops once `max_infra_failures` rollouts in a row failed, with the reason in its error; the
 * node logs the same reason; a batch skipped on the way says what failed.
 *
 * - a kubeconfig the client library refuses (plain http:// without insecure-skip-tls-verify):
 *   no request ever reaches the server;
 * - an API server that answers 403 Forbidden to every create (a Role without `create`).
 */
import { join } from "node:path"
import { readFileSync, writeFileSync } from "node:fs"
import { afterAll, describe, expect, it } from "vitest"
import { exitWithin, waitFor, workspace, writeTinyRun } from "../reins/trainFixture.js"
import { K8sDouble } from "./k8sDouble.js"

const doubles: Array<K8sDouble> = []
const workspaces: Array<ReturnType<typeof workspace>> = []
afterAll(async () => {
  workspaces.forEach((ws) => ws.cleanup())
  await Promise.all(doubles.map((d) => d.close()))
})

const FORBIDDEN = 'jobs.batch is forbidden: User "system:serviceaccount:reins:reins-node" cannot create resource "jobs" in API group "batch" in the namespace "reins"'

const kubeconfig = (dir: string, server: string, insecure: boolean) => {
  const file = join(dir, "kubeconfig")
  writeFileSync(file, [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "  - name: lab",
    `    cluster: { server: "${server}"${insecure ? ", insecure-skip-tls-verify: true" : ""} }`,
    "users:",
    "  - name: ops",
    "    user: { token: t0ken }",
    "contexts:",
    "  - name: lab",
    "    context: { cluster: lab, user: ops }",
    "current-context: lab",
    ""
  ].join("\n"))
  return file
}

/** A rollout node on `kubeconfig` and a `reins train --join` of the tiny run whose harness runs as Jobs; the run must exit on its own. */
const failingRun = async (name: string, d: K8sDouble, insecure: boolean, maxInfraFailures: number) => {
  const ws = workspace(name)
  workspaces.push(ws)
  await writeTinyRun(ws.dir, { max_infra_failures: maxInfraFailures })
  const config = JSON.parse(readFileSync(join(ws.dir, "run.json"), "utf8"))
  config.harness.kubernetes = { image: "registry.example/agent:1", namespace: "reins" }
  writeFileSync(join(ws.dir, "run.json"), JSON.stringify(config))
  const node = ws.reins(["node", "--roles", "rollout", "--listen", "127.0.0.1:0", "--data", "rollout-node"], {
    REINS_ROLLOUT_LAUNCHER: "kubernetes",
    REINS_ROLLOUT_NAMESPACES: "reins",
    KUBECONFIG: kubeconfig(ws.dir, d.url, insecure)
  })
  await waitFor(() => /listening on (ws:\/\/\S+)/.test(node.output()), 60_000, () => `the rollout node\n${node.output()}`)
  const address = /listening on (ws:\/\/\S+)/.exec(node.output())![1]!
  const train = ws.reins([
    "train", "run.json", "--join", address, "--secret-file", join(ws.dir, "rollout-node", "cluster-secret"), "--node-data", "train-node", "--no-local-rollouts"
  ])
  const code = await exitWithin(train, 240_000)
  return { code, train: train.output(), node: node.output() }
}

/** The streak the run stopped at (its error says "the last N rollouts ..."). */
const streakOf = (output: string) => Number(/the last (\d+) rollouts all failed for an infrastructure reason/.exec(output)?.[1] ?? NaN)

describe("a cluster that runs no Job fails loudly", () => {
  it("a kubeconfig the client refuses: the run stops after max_infra_failures rollouts, naming the fix; the node says it at start", async () => {
    const d = await K8sDouble.start()
    doubles.push(d)
    const run = await failingRun("k8s-refused", d, false, 2)
    expect(run.code, run.train).toBe(1)
    expect(run.train).toMatch(/reins train: the last \d+ rollouts all failed for an infrastructure reason \(max_infra_failures = 2\), most often infra\/invalid-spec/)
    expect(run.train).toContain("without insecure-skip-tls-verify")
    // groups of 2: the first finished group already reaches 2
    expect(streakOf(run.train)).toBe(2)
    expect(run.node).toMatch(/Kubernetes launcher: Kubernetes config: cluster lab is plain HTTP \(http:\/\/127\.0\.0\.1:\d+\) without insecure-skip-tls-verify/)
    expect(run.node).toMatch(/cannot launch attempt \S+: Kubernetes config/)
    // the client never sent anything
    expect(d.requests).toEqual([])
  }, 300_000)

  it("403 on every create: a skipped batch says what failed, the run stops within max_infra_failures with the API's message; the node logs it", async () => {
    const d = await K8sDouble.start()
    doubles.push(d)
    d.failNext({ method: "POST", path: /\/jobs$/, status: 403, message: FORBIDDEN, times: 1_000 })
    const run = await failingRun("k8s-forbidden", d, true, 6)
    expect(run.code, run.train).toBe(1)
    // two groups of 2 made a batch with nothing to train: its line says why
    expect(run.train).toMatch(/\(batch of 2 groups skipped at version 0: no trainable samples\)\n\s+failed: 4 attempts \(4 rollouts\), most often infra\/invalid-spec \(4×\): create Job reins-\S+: HTTP 403 Forbidden: jobs\.batch is forbidden/)
    expect(run.train).toMatch(/reins train: the last \d+ rollouts all failed for an infrastructure reason \(max_infra_failures = 6\), most often infra\/invalid-spec \(\d+×\): create Job \S+: HTTP 403 Forbidden: jobs\.batch is forbidden: User "system:serviceaccount:reins:reins-node" cannot create resource "jobs"/)
    expect(streakOf(run.train)).toBe(6)
    // every attempt was one create (403 is not retried); the run stopped while the third
    // group's refill was in flight at most (async_groups 3 × group_size 2 beyond the 6 counted)
    const creates = d.requests.filter((r) => r.method === "POST").length
    expect(creates).toBeGreaterThanOrEqual(6)
    expect(creates).toBeLessThanOrEqual(6 + 3 * 2)
    expect(d.creates).toEqual([])
    // the node said so too, with the API's status and message, once per kind within the interval
    const logged = run.node.split("\n").filter((l) => l.includes("could not create Job"))
    expect(logged.length).toBeGreaterThanOrEqual(1)
    expect(logged.length).toBeLessThan(creates)
    expect(logged[0]).toContain(`HTTP 403 Forbidden: ${FORBIDDEN}`)
  }, 300_000)
})
