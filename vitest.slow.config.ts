import { defineConfig, mergeConfig } from "vitest/config"
import base from "./vitest.config.js"

/** `npm run test:slow`: the long runs (whole training runs), never part of `npm test`. */
export default mergeConfig(base, defineConfig({ test: { include: ["test/slow/**/*.slow.ts"] } }))
