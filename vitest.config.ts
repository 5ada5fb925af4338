import { defaultServerConditions } from "vite"
import { defineConfig } from "vitest/config"

/**
 * The tests use reins compiled, as an installed reins runs: the global setup brings each
 * package's dist/ up to date with its sources first (`npm run build`, incremental), and the
 * workers import dist/ natively, as external modules. Running the sources through vitest's
 * transform instead cost each test file ~1.3 s more of CPU (measured on 13 files of the suite).
 *
 * `REINS_TEST_SOURCES=1` runs the TypeScript sources instead (for `vitest --watch`, where
 * dist/ would lag an edit): under the `reins-source` export condition each package resolves to
 * `src/`; vitest resolves with it, and its workers and the fixtures they start get it through
 * NODE_OPTIONS (fixtures run with `--import tsx`). The `reins` CLI processes a test starts run
 * compiled either way (test/reinsCli.ts drops the condition).
 */
const fromSources = process.env["REINS_TEST_SOURCES"] === "1"
const SOURCE = "--conditions=reins-source"

export default defineConfig({
  ...(fromSources ? { ssr: { resolve: { conditions: ["reins-source", ...defaultServerConditions] } } } : {}),
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/globalSetup.ts"],
    ...(fromSources
      ? { env: { NODE_OPTIONS: [process.env["NODE_OPTIONS"], SOURCE].filter(Boolean).join(" ") } }
      : { server: { deps: { external: [/\/packages\/[^/]+\/dist\//, /\/runtime\/dist\//] } } }),
    // Real processes, sockets and a real model: generous but bounded.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Forks keep native addons (better-sqlite3, tfjs wasm) and worker threads out of vitest's own
    // process. Each fork runs file after file without re-importing what the last one loaded
    // (`isolate: false`): importing effect and reins's packages again cost each file ~2 s, ~110 s
    // of the suite's ~1,070 s of CPU. Test files therefore restore whatever global they change
    // (environment variables, patched builtins) and do not use @effect/vitest's `layer`, which
    // patches the shared `it` (test/describeWithLayer.ts).
    pool: "forks",
    isolate: false,
    maxWorkers: 2,
    slowTestThreshold: 5_000
  }
})
