// Types for calculator.mjs (for TypeScript importers such as the tests).
export declare class CalcError extends Error {}
export declare const evaluate: (text: string) => number
export declare const formatNumber: (value: number) => string
export declare const calculate: (expression: string) => string
