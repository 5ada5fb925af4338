export * from "./Generation.js"
