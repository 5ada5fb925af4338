export * as Packed from "./Packed.js"
