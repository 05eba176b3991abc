// the stub first: it makes `require("vscode")` return itself
import * as stub from "./vscodeStub";
import assert from "node:assert/strict";
import { beforeEach, describe, test } from "node:test";
import type { ClientOptions, Disposable, LspClient } from "../../client";
import { activate, Dependencies, formatStats, STATUS_NOTIFICATION, SyntaxlockExtension } from "../../extension";
import type { Environment, ServerCommand } from "../../serverCommand";

/** A language client that records what the extension does with it. */
class FakeClient implements LspClient {
  started = 0;
  stopped = 0;
  running = false;
  notifications: { method: string; params: unknown }[] = [];
  requests: { method: string; params: unknown }[] = [];
  handlers = new Map<string, (params: unknown) => void>();
  stateListeners: ((e: { oldState: number; newState: number }) => void)[] = [];
  initializeResult: LspClient["initializeResult"] = {
    capabilities: {
      executeCommandProvider: {
        commands: ["syntaxlock.accepted", "syntaxlock.dismissed", "syntaxlock.stats", "syntaxlock.status"],
      },
    },
  };
  startError: Error | undefined;
  answers = new Map<string, unknown>();

  constructor(readonly command: ServerCommand, readonly options: ClientOptions) {}

  start(): Promise<void> {
    this.started++;
    if (this.startError) {
      return Promise.reject(this.startError);
    }
    this.running = true;
    this.emitState(3, 2);
    return Promise.resolve();
  }
  stop(): Promise<void> {
    this.stopped++;
    this.running = false;
    this.emitState(2, 1);
    return Promise.resolve();
  }
  isRunning(): boolean {
    return this.running;
  }
  onNotification(method: string, handler: (params: unknown) => void): Disposable {
    this.handlers.set(method, handler);
    return { dispose: () => this.handlers.delete(method) };
  }
  onDidChangeState(listener: (e: { oldState: number; newState: number }) => void): Disposable {
    this.stateListeners.push(listener);
    return { dispose: () => (this.stateListeners = this.stateListeners.filter((l) => l !== listener)) };
  }
  sendNotification(method: string, params?: unknown): Promise<void> {
    this.notifications.push({ method, params });
    return Promise.resolve();
  }
  sendRequest(method: string, params?: unknown): Promise<unknown> {
    this.requests.push({ method, params });
    const command = (params as { command?: string } | undefined)?.command ?? "";
    return Promise.resolve(this.answers.get(command) ?? null);
  }
  /** The server sends a notification. */
  notify(method: string, params: unknown): void {
    const h = this.handlers.get(method);
    assert.ok(h, `no handler for ${method}`);
    h(params);
  }
  emitState(oldState: number, newState: number): void {
    for (const l of this.stateListeners) {
      l({ oldState, newState });
    }
  }
}

const SERVER = "/venv/bin/syntaxlock";

function deps(clients: FakeClient[], executables = [SERVER], tweak?: (c: FakeClient) => void): Dependencies {
  const environment = (): Environment => ({
    platform: "linux",
    pathVariable: "/venv/bin",
    home: "/home/ada",
    workspaceFolders: [],
    isExecutableFile: (f) => executables.includes(f),
    probePython: () => null,
  });
  return {
    environment,
    createClient: (command, options) => {
      const c = new FakeClient(command, options);
      tweak?.(c);
      clients.push(c);
      return Promise.resolve(c);
    },
  };
}

function context(): { subscriptions: { dispose(): unknown }[] } {
  return { subscriptions: [] };
}

async function start(clients: FakeClient[], executables?: string[], tweak?: (c: FakeClient) => void): Promise<SyntaxlockExtension> {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  return activate(context() as any, deps(clients, executables, tweak));
}

/** Lets queued promise callbacks run. */
const settle = () => new Promise((r) => setImmediate(r));

function statusItem(): stub.FakeStatusBarItem {
  assert.equal(stub.state.statusItems.length, 1);
  return stub.state.statusItems[0]!;
}

beforeEach(() => stub.reset());

describe("activation", () => {
  test("starts the server found on PATH with the settings as initializationOptions", async () => {
    const clients: FakeClient[] = [];
    stub.setSetting("syntaxlock.maxTokens", 32);
    const ext = await start(clients);
    assert.equal(clients.length, 1);
    const c = clients[0]!;
    assert.equal(c.started, 1);
    assert.equal(c.command.command, SERVER);
    assert.deepEqual(c.command.args, ["serve", "--stdio", "--log-level", "info"]);
    assert.equal(c.options.initializationOptions.maxTokens, 32);
    assert.equal(c.options.initializationOptions.model, "default");
    assert.equal(c.options.initializationOptions.store, null);
    assert.equal(ext.clientState.kind, "running");
    assert.equal(statusItem().visible, true);
    ext.dispose();
  });

  test("registers its commands", async () => {
    const ext = await start([]);
    for (const id of ["syntaxlock.toggle", "syntaxlock.restart", "syntaxlock.showLog", "syntaxlock.showStats", "syntaxlock.dismiss"]) {
      assert.ok(stub.state.commands.has(id), id);
    }
    ext.dispose();
    assert.equal(stub.state.commands.size, 0);
  });

  test("a missing server: an error message with the fix, an error in the status bar, no client", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients, []);
    assert.equal(clients.length, 0);
    assert.equal(ext.clientState.kind, "stopped");
    const msg = stub.state.messages.find((m) => m.level === "error");
    assert.ok(msg);
    assert.match(msg.text, /not found/);
    assert.match(msg.text, /pip install syntaxlock/);
    assert.deepEqual(msg.items, ["Open Settings", "Show Log"]);
    assert.match(statusItem().text, /\$\(error\)/);
    assert.equal(statusItem().command, "syntaxlock.showLog");
    assert.ok(stub.state.logs[0]!.lines.some((l) => l.includes("not found")));
    ext.dispose();
  });

  test("the error message's button opens the client settings", async () => {
    stub.state.messageAnswer = "Open Settings";
    const ext = await start([], []);
    await settle();
    assert.ok(stub.state.executed.some((e) => e.command === "workbench.action.openSettings" && e.args[0] === "syntaxlock.server"));
    ext.dispose();
  });

  test("a server that fails to start: the reason in the message and the status bar", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients, [SERVER], (c) => (c.startError = new Error("Server exited with code 1")));
    assert.equal(ext.clientState.kind, "stopped");
    assert.equal(ext.languageClient, undefined);
    const msg = stub.state.messages.find((m) => m.level === "error");
    assert.match(msg!.text, /did not start/);
    assert.match(msg!.text, /Server exited with code 1/);
    assert.match(String(statusItem().tooltip), /Server exited with code 1/);
    ext.dispose();
  });
});

describe("status bar", () => {
  test("follows syntaxlock/status: loading with progress, ready, off, error", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    const c = clients[0]!;
    c.notify(STATUS_NOTIFICATION, { state: "loading", message: "building the mask store", percentage: 40 });
    assert.equal(statusItem().text, "$(sync~spin) syntaxlock 40%");
    c.notify(STATUS_NOTIFICATION, { state: "ready", message: "default on cpu", percentage: null });
    assert.equal(statusItem().text, "$(check) syntaxlock");
    c.notify(STATUS_NOTIFICATION, { state: "disabled", message: "", percentage: null });
    assert.equal(statusItem().text, "$(circle-slash) syntaxlock off");
    c.notify(STATUS_NOTIFICATION, { state: "error", message: "model not found", percentage: null });
    assert.match(statusItem().text, /\$\(error\)/);
    assert.ok(statusItem().backgroundColor instanceof stub.ThemeColor);
    ext.dispose();
  });

  test("ignores a malformed notification, and logs it", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    clients[0]!.notify(STATUS_NOTIFICATION, { state: "ready", message: "", percentage: null });
    clients[0]!.notify(STATUS_NOTIFICATION, { state: "bogus" });
    assert.equal(statusItem().text, "$(check) syntaxlock");
    assert.ok(stub.state.logs[0]!.lines.some((l) => l.includes("malformed")));
    ext.dispose();
  });

  test("a server that dies shows an error", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    clients[0]!.emitState(2, 1);
    assert.equal(ext.clientState.kind, "stopped");
    assert.match(String(statusItem().tooltip), /exited/);
    ext.dispose();
  });
});

describe("settings changes", () => {
  test("toggle turns syntaxlock.enabled off and on and tells the server", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    await stub.commands.executeCommand("syntaxlock.toggle");
    const c = clients[0]!;
    assert.equal(stub.workspace.getConfiguration("syntaxlock").get("enabled"), false);
    const sent = c.notifications.filter((n) => n.method === "workspace/didChangeConfiguration");
    assert.equal(sent.length, 1);
    const settings = (sent[0]!.params as { settings: { syntaxlock: Record<string, unknown> } }).settings.syntaxlock;
    assert.equal(settings.enabled, false);
    assert.equal(settings.maxTokens, 64);
    assert.equal("server.path" in settings, false);
    await stub.commands.executeCommand("syntaxlock.toggle");
    assert.equal(stub.workspace.getConfiguration("syntaxlock").get("enabled"), true);
    assert.equal(c.notifications.length, 2);
    assert.equal(clients.length, 1, "toggling does not restart the server");
    ext.dispose();
  });

  test("toggle writes where the setting was set", async () => {
    const ext = await start([]);
    stub.setSetting("syntaxlock.enabled", true, stub.ConfigurationTarget.Workspace);
    await stub.commands.executeCommand("syntaxlock.toggle");
    assert.deepEqual(stub.state.user.get("syntaxlock.enabled"), { value: false, target: stub.ConfigurationTarget.Workspace });
    ext.dispose();
  });

  test("a server option change is sent, a client setting change restarts the server", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    stub.setSetting("syntaxlock.mode", "multi");
    assert.equal(
      (clients[0]!.notifications[0]!.params as { settings: { syntaxlock: { mode: string } } }).settings.syntaxlock.mode,
      "multi",
    );
    stub.setSetting("syntaxlock.server.logLevel", "debug");
    await ext.restart(); // waits for the restart the change queued
    assert.equal(clients.length >= 2, true);
    assert.equal(clients[0]!.stopped, 1);
    const last = clients[clients.length - 1]!;
    assert.deepEqual(last.command.args, ["serve", "--stdio", "--log-level", "debug"]);
    assert.equal(last.options.initializationOptions.mode, "multi");
    assert.equal(ext.clientState.kind, "running");
    ext.dispose();
  });

  test("other settings are ignored", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    stub.setSetting("editor.fontSize", 14);
    assert.equal(clients[0]!.notifications.length, 0);
    assert.equal(clients.length, 1);
    ext.dispose();
  });

  test("turning completions on after a failed start tries again", async () => {
    const clients: FakeClient[] = [];
    const executables: string[] = [];
    stub.setSetting("syntaxlock.enabled", false);
    const ext = await start(clients, executables);
    assert.equal(clients.length, 0);
    executables.push(SERVER); // the user installed it
    await stub.commands.executeCommand("syntaxlock.toggle");
    assert.equal(clients.length, 1);
    assert.equal(clients[0]!.options.initializationOptions.enabled, true);
    ext.dispose();
  });
});

describe("cursor", () => {
  test("cursor moves in a Python editor reach the server as syntaxlock/cursor", async () => {
    const clients: FakeClient[] = [];
    const ed = stub.editor("file:///w/a.py", "python", 3, 0, 0);
    stub.state.activeTextEditor = ed;
    const ext = await start(clients);
    ext.cursor.flush(); // the debounce's end: the active editor's cursor, for the new server
    const c = clients[0]!;
    const sent = () => c.notifications.filter((n) => n.method === "syntaxlock/cursor").map((n) => n.params);
    assert.deepEqual(sent(), [{ textDocument: { uri: "file:///w/a.py", version: 3 }, position: { line: 0, character: 0 } }]);
    stub.moveCursor(ed, 7, 4);
    ext.cursor.flush();
    assert.deepEqual(sent()[1], { textDocument: { uri: "file:///w/a.py", version: 3 }, position: { line: 7, character: 4 } });
    const other = stub.editor("file:///w/notes.md", "markdown", 1, 2, 2);
    stub.activate(other);
    stub.moveCursor(other, 3, 3);
    ext.cursor.flush();
    assert.equal(sent().length, 2, "not for other languages");
    const b = stub.editor("file:///w/b.py", "python", 1, 9, 1);
    stub.activate(b);
    ext.cursor.flush();
    assert.deepEqual(sent()[2], { textDocument: { uri: "file:///w/b.py", version: 1 }, position: { line: 9, character: 1 } });
    ext.dispose();
    stub.moveCursor(b, 1, 1);
    ext.cursor.flush();
    assert.equal(sent().length, 3, "nothing after dispose");
  });
});

describe("commands", () => {
  test("restart stops the client and starts a new one", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    await stub.commands.executeCommand("syntaxlock.restart");
    assert.equal(clients.length, 2);
    assert.equal(clients[0]!.stopped, 1);
    assert.equal(clients[1]!.started, 1);
    assert.equal(ext.languageClient, clients[1]);
    ext.dispose();
  });

  test("showLog reveals the output channel", async () => {
    const ext = await start([]);
    await stub.commands.executeCommand("syntaxlock.showLog");
    assert.equal(stub.state.logs[0]!.shown, 1);
    ext.dispose();
  });

  test("showStats asks the server and shows its counters", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients, [SERVER], (c) =>
      c.answers.set("syntaxlock.stats", { shown: 10, accepted: 4, dismissed: 5, acceptRate: 0.4, meanLatencyMs: 123.4 }),
    );
    await stub.commands.executeCommand("syntaxlock.showStats");
    assert.deepEqual(clients[0]!.requests[0], {
      method: "workspace/executeCommand",
      params: { command: "syntaxlock.stats", arguments: [] },
    });
    const info = stub.state.messages.find((m) => m.level === "information");
    assert.equal(info?.text, "syntaxlock: 10 shown, 4 accepted (40%), 5 dismissed; mean latency 123 ms.");
    ext.dispose();
  });

  test("formatStats copes with missing numbers", () => {
    assert.equal(formatStats(null), "syntaxlock: the server sent no statistics.");
    assert.equal(formatStats({ shown: 0 }), "syntaxlock: 0 shown, 0 accepted (0%), 0 dismissed; mean latency n/a.");
  });
});

describe("acceptance and dismissal", () => {
  const item = (id: number) => ({ insertText: "x", command: { title: "syntaxlock accepted", command: "syntaxlock.accepted", arguments: [id] } });
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const any = undefined as any;

  test("Escape hides the suggestion and reports it dismissed", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    const mw = clients[0]!.options.middleware;
    await mw.provideInlineCompletionItems(any, any, any, any, () => [item(7)] as never);
    await stub.commands.executeCommand("syntaxlock.dismiss");
    assert.ok(stub.state.executed.some((e) => e.command === "editor.action.inlineSuggest.hide"));
    assert.deepEqual(clients[0]!.requests, [
      { method: "workspace/executeCommand", params: { command: "syntaxlock.dismissed", arguments: [7] } },
    ]);
    ext.dispose();
  });

  test("an item replaced by a new request was dismissed; an accepted one is not", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    const c = clients[0]!;
    const mw = c.options.middleware;
    await mw.provideInlineCompletionItems(any, any, any, any, () => [item(1)] as never);
    await mw.provideInlineCompletionItems(any, any, any, any, () => ({ items: [item(2)] }) as never);
    assert.deepEqual(c.requests.map((r) => r.params), [{ command: "syntaxlock.dismissed", arguments: [1] }]);
    // VS Code runs the item's command on acceptance: it goes to the server, and settles the item
    const forwarded: unknown[] = [];
    await mw.executeCommand("syntaxlock.accepted", [2], (command, args) => forwarded.push([command, args]));
    assert.deepEqual(forwarded, [["syntaxlock.accepted", [2]]]);
    await mw.provideInlineCompletionItems(any, any, any, any, () => null);
    assert.equal(c.requests.length, 1, "the accepted item is not reported dismissed");
    ext.dispose();
  });

  test("the server's configuration requests get the server options only", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients);
    stub.setSetting("syntaxlock.server.path", SERVER);
    const mw = clients[clients.length - 1]!.options.middleware;
    const answer = (await mw.workspace.configuration({ items: [{ section: "syntaxlock" }] }, any, () => ["passed on"])) as Record<
      string,
      unknown
    >[];
    assert.equal(answer.length, 1);
    assert.equal(answer[0]!.maxTokens, 64);
    assert.equal("server.path" in answer[0]!, false);
    const other = await mw.workspace.configuration({ items: [{ section: "python" }] }, any, () => ["passed on"]);
    assert.deepEqual(other, ["passed on"]);
    await ext.stop();
    ext.dispose();
  });

  test("a server without syntaxlock.accepted: the extension registers it so acceptance does not fail", async () => {
    const clients: FakeClient[] = [];
    const ext = await start(clients, [SERVER], (c) => (c.initializeResult = { capabilities: {} }));
    assert.ok(stub.state.commands.has("syntaxlock.accepted"));
    const mw = clients[0]!.options.middleware;
    await mw.provideInlineCompletionItems(any, any, any, any, () => [item(3)] as never);
    await stub.commands.executeCommand("syntaxlock.accepted", 3);
    assert.equal(ext.tracker.pendingCount, 0);
    await ext.stop();
    assert.equal(stub.state.commands.has("syntaxlock.accepted"), false, "dropped with the client");
    ext.dispose();
  });
});
