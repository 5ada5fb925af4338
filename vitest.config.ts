import { defaultServerConditions } from "vite"
import { defineConfig } from "vitest/config"

/**
 * The tests import reins from its TypeScript sources: under the `reins-source` export condition
 * each package resolves to `src/` instead of the compiled `dist/` an installed reins uses. Vitest
 * resolves with it and starts its workers with `--conditions reins-source` (their worker threads
 * inherit it), and fixtures run with `--import tsx` get it through NODE_OPTIONS. The `reins` CLI
 * processes a test starts run compiled instead (test/reinsCli.ts drops the condition), as a user
 * runs them: the global setup rebuilds dist/ first, so it never lags the sources.
 */
const SOURCE = "--conditions=reins-source"

export default defineConfig({
  ssr: { resolve: { conditions: ["reins-source", ...defaultServerConditions] } },
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/globalSetup.ts"],
    env: { NODE_OPTIONS: [process.env.NODE_OPTIONS, SOURCE].filter(Boolean).join(" ") },
    // Real processes, sockets and a real model: generous but bounded.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Forks isolate native addons (better-sqlite3, tfjs wasm) and worker threads per file.
    pool: "forks",
    maxWorkers: 2,
    slowTestThreshold: 5_000
  }
})
