#!/usr/bin/env node
// reins is written in TypeScript and runs from source through tsx (a dependency), so a clean
// clone needs no build step.
import { register } from "tsx/esm/api"

register()
await import("../src/bin.ts")
