import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Real processes, sockets and a real model: generous but bounded.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Forks isolate native addons (better-sqlite3, tfjs wasm) and worker threads per file.
    pool: "forks",
    maxWorkers: 2,
    slowTestThreshold: 5_000
  }
})
