/**
 * The server's stderr in the output channel. The server logs with Python's logging, one record a
 * line (`2026-11-24 14:41:33,845 INFO lsp_server.server.suggester: completed ...`, a traceback's
 * lines after its record), and sends some of its lines to the client as window/logMessage too,
 * which vscode-languageclient writes to the same channel: it logs those under SENT_LOGGER, and
 * they are left out here, so that each line shows once. The others are written at their own
 * level (the client library's default writes every stderr line as an error).
 */
import * as readline from "node:readline";
import type * as stream from "node:stream";
import type * as vscode from "vscode";

/** The server's logger for the lines it also sends as window/logMessage (lsp_server/server/server.py). */
export const SENT_LOGGER = "lsp_server.logMessage";

export type Channel = Pick<vscode.LogOutputChannel, "info" | "warn" | "error">;
type Level = keyof Channel;

export interface RecordStart {
  level: Level;
  logger: string;
}

const RECORD_START = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): /;

/**
 * The channel's level for each of the server's: DEBUG goes out at info, since the channel hides
 * debug by default and the user asked for these lines (`syntaxlock.server.logLevel`).
 */
const LEVELS: Readonly<Record<string, Level>> = {
  DEBUG: "info",
  INFO: "info",
  WARNING: "warn",
  ERROR: "error",
  CRITICAL: "error",
};

/** The level and logger of a line that begins a log record; undefined for any other line. */
export function recordStart(line: string): RecordStart | undefined {
  const m = RECORD_START.exec(line);
  return m ? { level: LEVELS[m[1]!]!, logger: m[2]! } : undefined;
}

/**
 * Writes the server's stderr to the channel line by line: a record's lines at its level (the
 * lines after a record's first, such as a traceback, go with it), those of SENT_LOGGER's records
 * not at all, and lines before any record (Python's own output at start-up) as errors.
 */
export class ServerStderr {
  private record: RecordStart | undefined;

  constructor(private readonly channel: Channel) {}

  line(text: string): void {
    this.record = recordStart(text) ?? this.record;
    if (this.record === undefined) {
      this.channel.error(text);
    } else if (this.record.logger !== SENT_LOGGER) {
      this.channel[this.record.level](text);
    }
  }
}

/** Calls `onLine` with each line of `input` (its last one also without a newline). */
export function pipeLines(input: stream.Readable, onLine: (line: string) => void): void {
  readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on("line", onLine);
}

/** Reads `input` (the server's stderr) to its end into the channel. */
export function pipeServerStderr(input: stream.Readable, channel: Channel): void {
  const sink = new ServerStderr(channel);
  pipeLines(input, (line) => sink.line(line));
}
