/**
 * What the status-bar item shows. The server reports its state with the `syntaxlock/status`
 * notification; the client adds its own states (starting, not running). Pure: a state in, a
 * view out.
 */

/** The body of the server's `syntaxlock/status` notification. */
export interface ServerStatus {
  state: "loading" | "ready" | "error" | "disabled";
  message: string;
  percentage: number | null;
}

export type ClientState =
  | { kind: "starting" }
  /** The server runs; `server` is its last status (undefined until the first one). */
  | { kind: "running"; server?: ServerStatus }
  /** Not running: the user stopped it, or it could not start (`error` says why). */
  | { kind: "stopped"; error?: string };

export interface StatusView {
  text: string;
  tooltip: string;
  /** The command run by a click on the item. */
  command: string;
  /** A theme colour id for the background, for errors and warnings. */
  background?: "statusBarItem.errorBackground" | "statusBarItem.warningBackground";
}

const NAME = "syntaxlock";

export const SERVER_STATES: readonly ServerStatus["state"][] = ["loading", "ready", "error", "disabled"];

/** The notification's body if it is well formed, else undefined. */
export function parseServerStatus(params: unknown): ServerStatus | undefined {
  if (typeof params !== "object" || params === null) {
    return undefined;
  }
  const p = params as Record<string, unknown>;
  if (typeof p.state !== "string" || !(SERVER_STATES as readonly string[]).includes(p.state)) {
    return undefined;
  }
  const percentage =
    typeof p.percentage === "number" && Number.isFinite(p.percentage)
      ? Math.max(0, Math.min(100, Math.round(p.percentage)))
      : null;
  return {
    state: p.state as ServerStatus["state"],
    message: typeof p.message === "string" ? p.message : "",
    percentage,
  };
}

export function statusView(state: ClientState): StatusView {
  switch (state.kind) {
    case "starting":
      return {
        text: `$(sync~spin) ${NAME}`,
        tooltip: "syntaxlock: starting the language server",
        command: "syntaxlock.showLog",
      };
    case "stopped":
      if (state.error !== undefined) {
        return {
          text: `$(error) ${NAME}`,
          tooltip: `syntaxlock: the server is not running: ${state.error}\nClick to show the log.`,
          command: "syntaxlock.showLog",
          background: "statusBarItem.errorBackground",
        };
      }
      return {
        text: `$(circle-slash) ${NAME}`,
        tooltip: "syntaxlock: the server is stopped. Click to start it.",
        command: "syntaxlock.restart",
      };
    case "running": {
      const s = state.server;
      if (s === undefined) {
        return {
          text: `$(sync~spin) ${NAME}`,
          tooltip: "syntaxlock: waiting for the server",
          command: "syntaxlock.showLog",
        };
      }
      const detail = s.message ? `: ${s.message}` : "";
      switch (s.state) {
        case "loading":
          return {
            text: `$(sync~spin) ${NAME}${s.percentage === null ? "" : ` ${s.percentage}%`}`,
            tooltip: `syntaxlock: loading${detail}`,
            command: "syntaxlock.showLog",
          };
        case "ready":
          return {
            text: `$(check) ${NAME}`,
            tooltip: `syntaxlock: ready${detail}\nClick to turn completions off.`,
            command: "syntaxlock.toggle",
          };
        case "error":
          return {
            text: `$(error) ${NAME}`,
            tooltip: `syntaxlock: error${detail}\nClick to show the log.`,
            command: "syntaxlock.showLog",
            background: "statusBarItem.errorBackground",
          };
        case "disabled":
          return {
            text: `$(circle-slash) ${NAME} off`,
            tooltip: `syntaxlock: completions are off${detail}\nClick to turn them on.`,
            command: "syntaxlock.toggle",
          };
      }
    }
  }
}
