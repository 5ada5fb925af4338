/** The subset of better-sqlite3 (12.x) the store uses; the package ships no types. */
declare module "better-sqlite3" {
  namespace BetterSqlite3 {
    interface RunResult {
      readonly changes: number
      readonly lastInsertRowid: number | bigint
    }
    interface Statement {
      run(...params: ReadonlyArray<unknown>): RunResult
      get(...params: ReadonlyArray<unknown>): unknown
      all(...params: ReadonlyArray<unknown>): Array<unknown>
      readonly reader: boolean
    }
    interface Database {
      prepare(sql: string): Statement
      exec(sql: string): Database
      pragma(source: string, options?: { readonly simple?: boolean }): unknown
      /** A user-defined SQL function (`deterministic` lets SQLite use it in indexes and fold repeated calls). */
      function(name: string, options: { readonly deterministic?: boolean }, fn: (...args: Array<any>) => unknown): Database
      transaction<F extends (...args: Array<any>) => any>(fn: F): F
      close(): Database
      readonly open: boolean
    }
  }
  const BetterSqlite3: {
    new (filename: string, options?: { readonly readonly?: boolean; readonly fileMustExist?: boolean }): BetterSqlite3.Database
  }
  export = BetterSqlite3
}
