import { defineConfig } from "vitest/config"
import base from "./vitest.config.js"

/**
 * `npm run test:slow`: the long runs (whole training runs), never part of `npm test`. The include
 * list replaces the base's (`mergeConfig` would concatenate the two and run every fast test too).
 */
export default defineConfig({ ...base, test: { ...base.test, include: ["test/slow/**/*.slow.ts"] } })
