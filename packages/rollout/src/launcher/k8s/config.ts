/**
 * Where the Kubernetes launcher finds its cluster. The default follows kubectl: `KUBECONFIG`,
 * then `~/.kube/config`, then the in-cluster service account (a launcher running in a pod, see
 * examples/k8s/). Unlike the client library's own fallback, finding nothing is an error rather
 * than a silent `http://localhost:8080`.
 */
import type { KubeConfig } from "@kubernetes/client-node"
import { LaunchConfigError } from "@reins/protocol"
import { Effect } from "effect"
import { existsSync } from "node:fs"
import { homedir } from "node:os"
import { join } from "node:path"
import { kubeClient } from "./client.js"

export type KubeConfigSource =
  /** KUBECONFIG, ~/.kube/config, or the in-cluster service account. */
  | { readonly _tag: "Default"; readonly context?: string }
  | { readonly _tag: "File"; readonly path: string; readonly context?: string }
  /** An explicit server (tests, or a proxy such as `kubectl proxy`). */
  | { readonly _tag: "Server"; readonly server: string; readonly token?: string; readonly skipTLSVerify?: boolean }
  | { readonly _tag: "Instance"; readonly kubeConfig: KubeConfig }

const SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"

const useContext = (kc: KubeConfig, context: string | undefined) => {
  if (context === undefined) return kc
  if (!kc.getContexts().some((c) => c.name === context)) throw new Error(`no context named ${context} (have: ${kc.getContexts().map((c) => c.name).join(", ")})`)
  kc.setCurrentContext(context)
  return kc
}

export const loadKubeConfig = (source: KubeConfigSource = { _tag: "Default" }): Effect.Effect<KubeConfig, LaunchConfigError> =>
  Effect.flatMap(kubeClient, ({ KubeConfig }) => Effect.try({
    try: () => {
      const kc = new KubeConfig()
      switch (source._tag) {
        case "Instance":
          return source.kubeConfig
        case "Server":
          kc.loadFromOptions({
            clusters: [{ name: "reins", server: source.server, skipTLSVerify: source.skipTLSVerify ?? false }],
            users: [{ name: "reins", ...(source.token === undefined ? {} : { token: source.token }) }],
            contexts: [{ name: "reins", cluster: "reins", user: "reins" }],
            currentContext: "reins"
          })
          return kc
        case "File":
          kc.loadFromFile(source.path)
          return useContext(kc, source.context)
        case "Default": {
          const fromEnv = (process.env.KUBECONFIG ?? "") !== ""
          if (!fromEnv && !existsSync(join(homedir(), ".kube", "config")) && !existsSync(SERVICE_ACCOUNT_TOKEN)) {
            throw new Error("no kubeconfig found: set KUBECONFIG, create ~/.kube/config, or run in a pod with a service account")
          }
          kc.loadFromDefault()
          return useContext(kc, source.context)
        }
      }
    },
    catch: (e) => new LaunchConfigError({ message: `Kubernetes config: ${(e as Error).message}` })
  })).pipe(
    Effect.filterOrFail(
      (kc) => kc.getCurrentCluster() !== null,
      () => new LaunchConfigError({ message: "Kubernetes config: no current cluster (check current-context)" })
    )
  )

/**
 * Why the client library will refuse every request to the current cluster, if it will: a plain
 * `http://` server without `insecure-skip-tls-verify: true` (and no proxy). The library only
 * says so when a request is made — each create then fails without reaching the server — so the
 * launcher checks once at start and names the fix.
 */
export const clientRefusal = (kc: KubeConfig): string | null => {
  const cluster = kc.getCurrentCluster()
  if (cluster === null || cluster.proxyUrl !== undefined) return null
  if (!cluster.server.startsWith("http:") || cluster.skipTLSVerify) return null
  return `Kubernetes config: cluster ${cluster.name} is plain HTTP (${cluster.server}) without insecure-skip-tls-verify: ` +
    "the client refuses to connect. Set `insecure-skip-tls-verify: true` on that cluster (e.g. for kubectl proxy), or use its https:// address"
}
