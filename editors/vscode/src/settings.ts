/**
 * The extension's settings: the server's options (mirrored one to one from the server's
 * initializationOptions, camelCase, under `syntaxlock.*`) and the client's own options
 * (`syntaxlock.server.*`: how to start the server).
 *
 * Pure functions over a settings reader, so that they are testable without VS Code.
 */

/** Reads one setting below `syntaxlock.` (e.g. `"maxTokens"`, `"server.path"`). */
export type SettingsReader = (key: string) => unknown;

/** The names of the server's options, in the order of the server's documentation. */
export const SERVER_OPTION_KEYS = [
  "enabled",
  "model",
  "device",
  "store",
  "maxTokens",
  "temperature",
  "topP",
  "seed",
  "constrained",
  "mode",
  "speculative",
  "canonical",
  "draftModel",
  "contextTokens",
  "firstWindowTokens",
  "completionItems",
  "workAhead",
  "latencyBudgetMs",
  "contextShare",
  "cacheMemoryMB",
  "pythonVersion",
  "identifiers",
  "teamServer",
] as const;

export type ServerOptionKey = (typeof SERVER_OPTION_KEYS)[number];

export interface ServerOptions {
  enabled: boolean;
  model: string;
  device: "auto" | "cpu" | "cuda";
  store: string | null;
  maxTokens: number;
  temperature: number;
  topP: number;
  seed: number | null;
  constrained: boolean;
  mode: "auto" | "single" | "multi";
  speculative: boolean;
  canonical: boolean;
  draftModel: string | null;
  contextTokens: number;
  firstWindowTokens: number;
  completionItems: boolean;
  workAhead: boolean;
  latencyBudgetMs: number;
  contextShare: number | null;
  cacheMemoryMB: number;
  pythonVersion: string | null;
  identifiers: "off" | "bias" | "constrain";
  teamServer: string | null;
}

/** The server's own defaults (the same values as package.json's `contributes.configuration`). */
export const SERVER_DEFAULTS: Readonly<ServerOptions> = Object.freeze({
  enabled: true,
  model: "default",
  device: "auto",
  store: null,
  maxTokens: 64,
  temperature: 0,
  topP: 1,
  seed: null,
  constrained: true,
  mode: "auto",
  speculative: true,
  canonical: true,
  draftModel: null,
  contextTokens: 1024,
  firstWindowTokens: 256,
  completionItems: true,
  workAhead: true,
  latencyBudgetMs: 250,
  contextShare: null,
  cacheMemoryMB: 96,
  pythonVersion: null,
  identifiers: "constrain",
  teamServer: null,
});

/**
 * The options to send to the server (initializationOptions, and the body of
 * workspace/didChangeConfiguration). Values are passed through as the user wrote them: the
 * server validates them and says what is wrong with window/showMessage. Settings left unset
 * (undefined) take the server's defaults; an empty string for `store` means null (VS Code's
 * settings editor can't clear a string back to null); so does an empty `draftModel`, `pythonVersion` or `teamServer`.
 */
export function serverOptions(read: SettingsReader): ServerOptions {
  const out: Record<string, unknown> = {};
  for (const key of SERVER_OPTION_KEYS) {
    let value = read(key);
    if (value === undefined) {
      value = SERVER_DEFAULTS[key];
    }
    if ((key === "store" || key === "seed" || key === "draftModel" || key === "pythonVersion" || key === "teamServer") && value === "") {
      value = null;
    }
    if (key === "model" && value === "") {
      value = SERVER_DEFAULTS.model;
    }
    out[key] = value;
  }
  return out as unknown as ServerOptions;
}

/** Log levels that `syntaxlock serve --log-level` takes. */
export const LOG_LEVELS = ["debug", "info", "warning", "error"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** How to start the server. Empty strings mean "not set". */
export interface ClientSettings {
  /** The `syntaxlock` executable; empty: look for it (PATH, then the workspace's .venv). */
  serverPath: string;
  /** A Python interpreter that has syntaxlock installed: runs `python -m lsp_server.cli`. */
  pythonPath: string;
  logLevel: LogLevel;
}

function str(value: unknown): string {
  return typeof value === "string" ? value.trim() : "";
}

export function clientSettings(read: SettingsReader): ClientSettings {
  const level = str(read("server.logLevel")).toLowerCase();
  return {
    serverPath: str(read("server.path")),
    pythonPath: str(read("server.pythonPath")),
    logLevel: (LOG_LEVELS as readonly string[]).includes(level) ? (level as LogLevel) : "info",
  };
}

/** Which kind of change a settings change is, given which `syntaxlock.*` keys it affects. */
export type SettingsChange = "none" | "server-options" | "restart";

/**
 * Client options need a new server process; server options are sent to the running server.
 * `affects(key)` answers VS Code's `ConfigurationChangeEvent.affectsConfiguration("syntaxlock." + key)`.
 */
export function classifyChange(affects: (key: string) => boolean): SettingsChange {
  if (affects("server")) {
    return "restart";
  }
  return SERVER_OPTION_KEYS.some((k) => affects(k)) ? "server-options" : "none";
}
