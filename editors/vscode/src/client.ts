/**
 * The language client: the subset of vscode-languageclient's `LanguageClient` the extension uses,
 * the factory that builds the real one, and the middleware that reports acceptance and
 * dismissal and answers the server's configuration requests.
 */
import type * as vscode from "vscode";
import type { Middleware } from "vscode-languageclient/node";
import type { ServerCommand } from "./serverCommand";
import { pipeLines, pipeServerStderr } from "./serverLog";
import type { ServerOptions } from "./settings";
import { ACCEPTED_COMMAND, CompletionTracker, resultIds } from "./telemetry";

export interface Disposable {
  dispose(): unknown;
}

/** vscode-languageclient's State: Stopped = 1, Running = 2, Starting = 3. */
export const ClientRunState = { Stopped: 1, Running: 2, Starting: 3 } as const;

/** What the extension needs of a language client (vscode-languageclient's LanguageClient has it). */
export interface LspClient {
  start(): Promise<void>;
  stop(timeout?: number): Promise<void>;
  isRunning(): boolean;
  onNotification(method: string, handler: (params: unknown) => void): Disposable;
  onDidChangeState(listener: (e: { oldState: number; newState: number }) => void): Disposable;
  sendNotification(method: string, params?: unknown): Promise<void>;
  sendRequest(method: string, params?: unknown): Promise<unknown>;
  readonly initializeResult: { capabilities: { executeCommandProvider?: { commands?: string[] } } } | undefined;
}

/** The middleware the extension installs: the parts of vscode-languageclient's it fills in. */
export type SyntaxlockMiddleware = Required<Pick<Middleware, "provideInlineCompletionItems" | "executeCommand">> & {
  workspace: Required<Pick<NonNullable<Middleware["workspace"]>, "configuration">>;
};

export interface ClientOptions {
  initializationOptions: ServerOptions;
  middleware: SyntaxlockMiddleware;
  outputChannel: vscode.LogOutputChannel;
}

export type ClientFactory = (command: ServerCommand, options: ClientOptions) => Promise<LspClient>;

/**
 * Middleware:
 * - inline completions: items still pending when a new request comes were dismissed (reported
 *   through `dismissed`); the new result's items are pending from then on;
 * - `syntaxlock.accepted [id]`, run by VS Code on acceptance, settles the item before the
 *   command goes to the server;
 * - workspace/configuration for the section `syntaxlock` answers with the server's options only
 *   (the client's `syntaxlock.server.*` settings are not the server's business).
 */
export function makeMiddleware(
  tracker: CompletionTracker,
  dismissed: (ids: (string | number)[]) => void,
  options: () => ServerOptions,
): SyntaxlockMiddleware {
  return {
    async provideInlineCompletionItems(document, position, context, token, next) {
      const gone = tracker.dismissAll();
      if (gone.length > 0) {
        dismissed(gone);
      }
      const result = await next(document, position, context, token);
      tracker.shown(resultIds(result));
      return result;
    },
    executeCommand(command, args, next) {
      if (command === ACCEPTED_COMMAND) {
        tracker.accepted(args[0]);
      }
      return next(command, args);
    },
    workspace: {
      configuration(params, token, next) {
        if (params.items.every((item) => item.section === "syntaxlock")) {
          return params.items.map(() => options());
        }
        return next(params, token);
      },
    },
  };
}

/** The real client: vscode-languageclient over the server's stdio. Loaded lazily. */
export const createLanguageClient: ClientFactory = (command, options) => {
  // required here, not at the top: unit tests run the extension without vscode-languageclient
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const lc = require("vscode-languageclient/node") as typeof import("vscode-languageclient/node");
  const client = new lc.LanguageClient(
    "syntaxlock",
    "syntaxlock",
    { command: command.command, args: command.args, transport: lc.TransportKind.stdio },
    {
      documentSelector: [
        { language: "python", scheme: "file" },
        { language: "python", scheme: "untitled" },
      ],
      outputChannel: options.outputChannel,
      // stderr: each line once, at its level (serverLog.ts); stdout (the protocol's over stdio) as
      // the library would write it
      stdioOptions: {
        stdout: (input, channel) => pipeLines(input, (line) => channel.info(line)),
        stderr: (input, channel) => pipeServerStderr(input, channel),
      },
      initializationOptions: options.initializationOptions,
      middleware: options.middleware,
    },
  );
  const checked: LspClient = client;
  return Promise.resolve(checked);
};
