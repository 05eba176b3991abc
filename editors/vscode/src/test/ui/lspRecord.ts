/**
 * What passed between VS Code and the server, as tests/lsp_recorder.py wrote it (one JSON line
 * per message, `{"from": "client" | "server", "message": ...}`): the real-editor test reads it to
 * know what the server offered, independently of what the page shows.
 */
import * as fs from "node:fs";
import { TextDocument } from "vscode-languageserver-textdocument";

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface InlineItem {
  insertText: string;
  range: Range;
  command?: { command: string; arguments?: unknown[] };
}

interface Message {
  id?: number | string;
  method?: string;
  params?: Record<string, unknown>;
  result?: unknown;
}

interface Entry {
  from: "client" | "server";
  message: Message;
}

/** One textDocument/inlineCompletion request, the document as the server had it then, and the answer. */
export interface InlineExchange {
  uri: string;
  position: Position;
  /** The document's text when the request was made. */
  text: string;
  version: number;
  /** The answer's items; undefined while unanswered, or when cancelled without an answer. */
  items: InlineItem[] | undefined;
}

export class LspRecord {
  private constructor(private readonly entries: readonly Entry[]) {}

  /** The record as it is now (a partly written last line is left for the next read). */
  static read(file: string): LspRecord {
    const text = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : "";
    const entries: Entry[] = [];
    for (const line of text.split("\n")) {
      try {
        entries.push(JSON.parse(line) as Entry);
      } catch {
        // an empty or unfinished line
      }
    }
    return new LspRecord(entries);
  }

  private sent(from: Entry["from"], method: string): Message[] {
    return this.entries.filter((e) => e.from === from && e.message.method === method).map((e) => e.message);
  }

  /** Every inline completion request in order, with the document it was made on and its answer. */
  inlineExchanges(): InlineExchange[] {
    const docs = new Map<string, TextDocument>();
    const pending = new Map<number | string, InlineExchange>();
    const out: InlineExchange[] = [];
    for (const { from, message } of this.entries) {
      const p = message.params as Record<string, any> | undefined;
      if (from === "client" && message.method === "textDocument/didOpen") {
        const d = p!.textDocument;
        docs.set(d.uri, TextDocument.create(d.uri, d.languageId, d.version, d.text));
      } else if (from === "client" && message.method === "textDocument/didChange") {
        const uri = p!.textDocument.uri as string;
        const doc = docs.get(uri);
        if (doc !== undefined) {
          docs.set(uri, TextDocument.update(doc, p!.contentChanges, p!.textDocument.version));
        }
      } else if (from === "client" && message.method === "textDocument/inlineCompletion") {
        const uri = p!.textDocument.uri as string;
        const doc = docs.get(uri);
        const exchange: InlineExchange = {
          uri,
          position: p!.position,
          text: doc?.getText() ?? "",
          version: doc?.version ?? -1,
          items: undefined,
        };
        pending.set(message.id!, exchange);
        out.push(exchange);
      } else if (from === "server" && message.id !== undefined && pending.has(message.id) && message.method === undefined) {
        const result = message.result as { items?: InlineItem[] } | InlineItem[] | null | undefined;
        pending.get(message.id)!.items = Array.isArray(result) ? result : (result?.items ?? []);
        pending.delete(message.id);
      }
    }
    return out;
  }

  /** The arguments of every workspace/executeCommand of `command` that VS Code sent. */
  commandArguments(command: string): unknown[][] {
    return this.sent("client", "workspace/executeCommand")
      .filter((m) => m.params?.command === command)
      .map((m) => (m.params?.arguments as unknown[] | undefined) ?? []);
  }

  /** The server's window/logMessage texts, in order. */
  loggedMessages(): string[] {
    return this.sent("server", "window/logMessage").map((m) => String(m.params?.message));
  }

  /** The server's window/showMessage texts, in order. */
  shownMessages(): string[] {
    return this.sent("server", "window/showMessage").map((m) => String(m.params?.message));
  }
}

/** `text` with `item` applied over its range, as accepting it should leave the document. */
export function applyItem(text: string, item: InlineItem): string {
  const doc = TextDocument.create("file:///applied", "python", 0, text);
  return TextDocument.applyEdits(doc, [{ range: item.range, newText: item.insertText }]);
}
