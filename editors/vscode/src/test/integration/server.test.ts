/**
 * The extension's protocol side against the real server: `syntaxlock serve --stdio` driven with
 * vscode-languageserver-protocol, as the language client would drive it, with the extension's
 * own pieces (the server command resolution, the settings, the middleware and its tracker).
 *
 * The model is a tiny random one (tests/conftest.py's make_tiny_model_dir): its completions are
 * nonsense, but they must still parse. Environment:
 *   SYNTAXLOCK_SERVER      the `syntaxlock` program (default: <repo>/.venv/bin/syntaxlock)
 *   SYNTAXLOCK_TEST_MODEL  the tiny model's directory (default: made with <repo>/.venv/bin/python)
 *   SYNTAXLOCK_CACHE       the cache of mask stores (default: <repo>/.cache/tests, as pytest's)
 */
import assert from "node:assert/strict";
import { ChildProcess, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import {
  CancellationTokenSource,
  createProtocolConnection,
  DidChangeConfigurationNotification,
  DidChangeTextDocumentNotification,
  DidOpenTextDocumentNotification,
  ExecuteCommandRequest,
  ExitNotification,
  InitializedNotification,
  InitializeRequest,
  InitializeResult,
  InlineCompletionItem,
  InlineCompletionList,
  InlineCompletionRequest,
  InlineCompletionTriggerKind,
  ProtocolConnection,
  ShowMessageNotification,
  ShowMessageParams,
  ShutdownRequest,
  StreamMessageReader,
  StreamMessageWriter,
  TextDocumentSyncKind,
  WorkDoneProgressCreateRequest,
} from "vscode-languageserver-protocol/node";
import { TextDocument } from "vscode-languageserver-textdocument";
import { makeMiddleware } from "../../client";
import { nodeEnvironment, resolveServerCommand } from "../../serverCommand";
import { serverOptions, ServerOptions } from "../../settings";
import { parseServerStatus, ServerStatus } from "../../status";
import { CompletionTracker, DISMISSED_COMMAND } from "../../telemetry";

const ROOT = path.resolve(__dirname, "..", "..", "..", "..", "..");
const PYTHON = path.join(ROOT, ".venv", "bin", "python");
const SERVER = process.env.SYNTAXLOCK_SERVER || path.join(ROOT, ".venv", "bin", "syntaxlock");
const CACHE = process.env.SYNTAXLOCK_CACHE || path.join(ROOT, ".cache", "tests");
const READY_TIMEOUT_MS = 600_000; // the first run builds the mask store
/** The server's stderr is kept here after the run, to read when a test fails. */
const SERVER_LOG = path.join(CACHE, "vscode-integration-server.log");

function tinyModel(): string {
  if (process.env.SYNTAXLOCK_TEST_MODEL) {
    return process.env.SYNTAXLOCK_TEST_MODEL;
  }
  const dir = path.join(CACHE, "tiny-model");
  const r = spawnSync(
    PYTHON,
    ["-c", "import sys; from pathlib import Path; from tests.conftest import make_tiny_model_dir; make_tiny_model_dir(Path(sys.argv[1]))", dir],
    { cwd: ROOT, encoding: "utf8", env: { ...process.env, SYNTAXLOCK_CACHE: CACHE } },
  );
  assert.equal(r.status, 0, `making the tiny model failed: ${r.stderr}`);
  return dir;
}

/** True if CPython compiles `source` (run with the project's interpreter). */
function cpythonParses(source: string): { ok: boolean; error: string } {
  const r = spawnSync(PYTHON, ["-c", "import sys; compile(sys.stdin.read(), '<completion>', 'exec')"], {
    input: source,
    encoding: "utf8",
  });
  return { ok: r.status === 0, error: r.stderr };
}

function until<T>(what: string, ms: number, poll: () => T | undefined): Promise<T> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const tick = () => {
      const v = poll();
      if (v !== undefined) {
        resolve(v);
      } else if (Date.now() - t0 > ms) {
        reject(new Error(`gave up waiting for ${what} after ${ms} ms`));
      } else {
        setTimeout(tick, 50);
      }
    };
    tick();
  });
}

describe("syntaxlock serve --stdio", () => {
  let proc: ChildProcess;
  let conn: ProtocolConnection;
  let init: InitializeResult;
  let stderr = "";
  const statuses: ServerStatus[] = [];
  const messages: ShowMessageParams[] = [];
  const progressTokens: unknown[] = [];
  const tracker = new CompletionTracker();
  const reported: unknown[] = [];
  let settings: ServerOptions;
  let doc: TextDocument;
  const uri = "file:///tmp/syntaxlock-vscode-test/shapes.py";
  const workspace = fs.mkdtempSync(path.join(os.tmpdir(), "syntaxlock-vscode-"));

  const middleware = makeMiddleware(
    tracker,
    (ids) => {
      for (const id of ids) {
        reported.push(id);
        void conn.sendRequest(ExecuteCommandRequest.type, { command: DISMISSED_COMMAND, arguments: [id] });
      }
    },
    () => settings,
  );

  /** Asks for inline completions through the extension's middleware, as the language client does. */
  async function inline(line: number, character: number): Promise<InlineCompletionItem[]> {
    const source = new CancellationTokenSource();
    const result = await middleware.provideInlineCompletionItems(
      // the middleware passes these through to `next` untouched; here they are LSP values
      doc as never,
      { line, character } as never,
      { triggerKind: InlineCompletionTriggerKind.Automatic, selectedCompletionInfo: undefined } as never,
      source.token,
      ((_d: unknown, position: { line: number; character: number }, context: unknown, token: never) =>
        conn.sendRequest(
          InlineCompletionRequest.type,
          { textDocument: { uri }, position, context: context as never },
          token,
        )) as never,
    );
    const r = result as unknown as InlineCompletionList | InlineCompletionItem[] | null;
    return r === null || r === undefined ? [] : Array.isArray(r) ? r : r.items;
  }

  function edit(text: string, at: { line: number; character: number }): void {
    const version = doc.version + 1;
    const change = { range: { start: at, end: at }, text };
    doc = TextDocument.update(doc, [change], version);
    void conn.sendNotification(DidChangeTextDocumentNotification.type, {
      textDocument: { uri, version },
      contentChanges: [change],
    });
  }

  function applied(item: InlineCompletionItem): string {
    assert.equal(typeof item.insertText, "string");
    assert.ok(item.range, "the item has a range");
    return TextDocument.applyEdits(doc, [{ range: item.range, newText: item.insertText as string }]);
  }

  before(async () => {
    const model = tinyModel();
    // the random model's greedy choice runs on to the token limit; sampling with this seed ends
    // lines within it (and the seed makes each request's sample the same run after run)
    const chosen: Record<string, unknown> = { model, device: "cpu", temperature: 1, seed: 0, maxTokens: 64 };
    settings = serverOptions((key) => chosen[key]);
    const command = resolveServerCommand({ serverPath: SERVER, pythonPath: "", logLevel: "info" }, nodeEnvironment([ROOT]));
    assert.ok(command.ok, command.ok ? "" : `${command.message} ${command.fix}`);
    proc = spawn(command.command, command.args, {
      env: { ...process.env, SYNTAXLOCK_CACHE: CACHE },
      stdio: ["pipe", "pipe", "pipe"],
    });
    proc.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    conn = createProtocolConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
    conn.onNotification("syntaxlock/status", (p: unknown) => {
      const s = parseServerStatus(p);
      assert.ok(s, `a well-formed syntaxlock/status: ${JSON.stringify(p)}`);
      statuses.push(s);
    });
    conn.onNotification(ShowMessageNotification.type, (p) => {
      messages.push(p);
    });
    conn.onRequest(WorkDoneProgressCreateRequest.type, (p) => {
      progressTokens.push(p.token);
    });
    conn.onRequest("workspace/configuration", (p: { items: { section?: string }[] }, token) =>
      middleware.workspace.configuration(p, token, () => p.items.map(() => null)),
    );
    conn.listen();
    init = await conn.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: `file://${workspace}`,
      workspaceFolders: null,
      capabilities: {
        window: { workDoneProgress: true, showMessage: {} },
        workspace: { configuration: true, executeCommand: {} },
        textDocument: { inlineCompletion: {}, synchronization: {} },
      },
      initializationOptions: settings,
    });
    await conn.sendNotification(InitializedNotification.type, {});
    doc = TextDocument.create(uri, "python", 1, "import math\n\n\ndef area(radius):\n    return ");
    await conn.sendNotification(DidOpenTextDocumentNotification.type, {
      textDocument: { uri, languageId: "python", version: 1, text: doc.getText() },
    });
    await until("the server to be ready", READY_TIMEOUT_MS, () => {
      const last = statuses[statuses.length - 1];
      assert.notEqual(last?.state, "error", `server error: ${last?.message}\n${stderr}`);
      return last?.state === "ready" ? true : undefined;
    });
  });

  after(async () => {
    if (conn && proc?.exitCode === null) {
      try {
        // the last test shuts the server down; this is for a run that failed before it
        await conn.sendRequest(ShutdownRequest.type);
        await conn.sendNotification(ExitNotification.type);
      } catch {
        // the connection is closed already
      }
    }
    if (proc && proc.exitCode === null) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          proc.kill();
          resolve();
        }, 10_000);
        proc.on("exit", () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    conn?.dispose();
    fs.rmSync(workspace, { recursive: true, force: true });
    fs.mkdirSync(path.dirname(SERVER_LOG), { recursive: true });
    fs.writeFileSync(SERVER_LOG, stderr);
    console.log(`# the server's log: ${SERVER_LOG}`);
  });

  test("offers what the extension needs", () => {
    const caps = init.capabilities as InitializeResult["capabilities"] & { inlineCompletionProvider?: unknown };
    assert.ok(caps.inlineCompletionProvider, "inlineCompletionProvider");
    assert.ok(caps.completionProvider, "completionProvider");
    const sync = caps.textDocumentSync;
    const kind = typeof sync === "number" ? sync : sync?.change;
    assert.equal(kind, TextDocumentSyncKind.Incremental);
    const commands = caps.executeCommandProvider?.commands ?? [];
    for (const c of ["syntaxlock.accepted", "syntaxlock.dismissed", "syntaxlock.stats", "syntaxlock.status"]) {
      assert.ok(commands.includes(c), c);
    }
  });

  test("reported loading before ready, with $/progress", () => {
    assert.ok(statuses.some((s) => s.state === "loading"), JSON.stringify(statuses));
    assert.equal(statuses[statuses.length - 1]!.state, "ready");
    assert.ok(progressTokens.length >= 1, "the server asked for a progress token");
  });

  test("an inline completion that parses once accepted", async () => {
    const items = await inline(4, 11);
    assert.equal(items.length, 1, "one suggestion");
    const item = items[0]!;
    assert.equal(item.command?.command, "syntaxlock.accepted");
    assert.equal(item.range!.start.line, 4);
    assert.equal(item.range!.start.character, 11);
    const text = applied(item);
    assert.ok(text.startsWith("import math\n\n\ndef area(radius):\n    return "));
    const parsed = cpythonParses(text);
    assert.ok(parsed.ok, `completion ${JSON.stringify(item.insertText)} does not parse:\n${parsed.error}`);
  });

  test("incremental edits: the next suggestion is for the new text, the previous one is dismissed", async () => {
    assert.equal(tracker.pendingCount, 1);
    edit("math.pi * ", { line: 4, character: 11 });
    const items = await inline(4, 21);
    assert.equal(reported.length, 1, "the first suggestion was reported dismissed");
    assert.equal(items.length, 1);
    const item = items[0]!;
    assert.equal(item.range!.start.line, 4);
    assert.equal(item.range!.start.character, 21);
    const text = applied(item);
    assert.ok(text.includes("return math.pi * "));
    const parsed = cpythonParses(text);
    assert.ok(parsed.ok, `completion ${JSON.stringify(item.insertText)} does not parse:\n${parsed.error}`);
    // accept it the way VS Code does: run the item's command (the middleware sees it first)
    const cmd = item.command!;
    const ok = await middleware.executeCommand(cmd.command, cmd.arguments ?? [], (command, args) =>
      conn.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }),
    );
    assert.equal(ok, true);
    assert.equal(tracker.pendingCount, 0);
  });

  test("syntaxlock.stats counts what was shown, accepted and dismissed", async () => {
    const stats = (await conn.sendRequest(ExecuteCommandRequest.type, { command: "syntaxlock.stats", arguments: [] })) as Record<
      string,
      number
    >;
    assert.equal(stats.shown, 2);
    assert.equal(stats.accepted, 1);
    assert.equal(stats.dismissed, 1);
    assert.equal(stats.acceptRate, 0.5);
    assert.ok(stats.meanLatencyMs! > 0);
  });

  test("syntaxlock.status names the model", async () => {
    const status = (await conn.sendRequest(ExecuteCommandRequest.type, { command: "syntaxlock.status", arguments: [] })) as Record<
      string,
      unknown
    >;
    assert.equal(status.state, "ready");
    assert.ok(String(status.model).includes(path.basename(settings.model)), `model: ${String(status.model)}`);
    assert.equal(status.device, "cpu");
    assert.ok("store" in status);
  });

  test("a bad setting is refused with window/showMessage, and the server goes on", async () => {
    const before = messages.length;
    settings = { ...settings, maxTokens: 0 };
    await conn.sendNotification(DidChangeConfigurationNotification.type, { settings: { syntaxlock: settings } });
    const shown = await until("a showMessage", 30_000, () => (messages.length > before ? messages[before] : undefined));
    assert.match(shown.message, /maxTokens/);
    settings = { ...settings, maxTokens: 64 };
    const items = await inline(4, 21);
    assert.equal(items.length, 1, "still serving");
  });

  test("toggling off: state disabled and no suggestions; on again: ready", async () => {
    tracker.dismissAll();
    const seen = statuses.length;
    settings = { ...settings, enabled: false };
    // an empty change makes the server pull the settings (answered by the middleware)
    await conn.sendNotification(DidChangeConfigurationNotification.type, { settings: null });
    await until("state disabled", 30_000, () => (statuses.slice(seen).some((s) => s.state === "disabled") ? true : undefined));
    assert.deepEqual(await inline(4, 21), []);
    const again = statuses.length;
    settings = { ...settings, enabled: true };
    await conn.sendNotification(DidChangeConfigurationNotification.type, { settings: { syntaxlock: settings } });
    await until("state ready", READY_TIMEOUT_MS, () => (statuses.slice(again).some((s) => s.state === "ready") ? true : undefined));
    assert.equal((await inline(4, 21)).length, 1);
  });

  test("shuts down cleanly", async () => {
    await conn.sendRequest(ShutdownRequest.type);
    const code = new Promise<number | null>((resolve) => proc.on("exit", (c) => resolve(c)));
    await conn.sendNotification(ExitNotification.type);
    assert.equal(await code, 0);
  });
});
