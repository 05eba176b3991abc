/**
 * Where the cursor is, for the server: the LSP has no cursor notification, so the extension
 * sends its own, `syntaxlock/cursor`, when the cursor of a Python editor moves or an editor
 * comes to the front, after a short pause (debounced: one notification for a burst of moves).
 * The server prefills the prompt at that cursor while the user pauses, so that the first
 * suggestion there does not wait for it.
 */

export const CURSOR_NOTIFICATION = "syntaxlock/cursor";
/** Moves closer together than this are reported once, with the last position. */
export const CURSOR_DEBOUNCE_MS = 150;

export interface CursorDocument {
  uri: { toString(): string };
  version: number;
  languageId: string;
}

export interface CursorPosition {
  line: number;
  character: number;
}

export interface CursorParams {
  textDocument: { uri: string; version: number };
  position: CursorPosition;
}

/** The timer functions the reporter uses (injectable for tests). */
export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const realTimers: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export class CursorReporter {
  private pending: CursorParams | undefined;
  private timer: unknown;
  private last: string | undefined;

  constructor(
    private readonly send: (params: CursorParams) => void,
    private readonly delayMs: number = CURSOR_DEBOUNCE_MS,
    private readonly timers: Timers = realTimers,
  ) {}

  /** The cursor of `document` is at `position` (Python documents only; others are ignored). */
  moved(document: CursorDocument, position: CursorPosition): void {
    if (document.languageId !== "python") {
      return;
    }
    this.pending = {
      textDocument: { uri: document.uri.toString(), version: document.version },
      position: { line: position.line, character: position.character },
    };
    if (this.timer !== undefined) {
      this.timers.clear(this.timer);
    }
    this.timer = this.timers.set(() => this.flush(), this.delayMs);
  }

  /** Sends the pending report now (unless it repeats the last one sent). */
  flush(): void {
    if (this.timer !== undefined) {
      this.timers.clear(this.timer);
      this.timer = undefined;
    }
    const params = this.pending;
    this.pending = undefined;
    if (params === undefined) {
      return;
    }
    const key = JSON.stringify(params);
    if (key !== this.last) {
      this.last = key;
      this.send(params);
    }
  }

  /** Forgets what was sent (a new server has not seen it). */
  reset(): void {
    this.last = undefined;
  }

  dispose(): void {
    if (this.timer !== undefined) {
      this.timers.clear(this.timer);
      this.timer = undefined;
    }
    this.pending = undefined;
  }
}
