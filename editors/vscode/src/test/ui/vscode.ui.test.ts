/**
 * The extension inside a real VS Code: code-server with our .vsix installed, driven in headless
 * Chromium as a person would use it, against the real `syntaxlock serve --stdio`. The server runs
 * behind tests/lsp_recorder.py, so that what it offered is known apart from what the page shows.
 *
 * Run by tests/test_editor_vscode_real.py (which finds the parts and builds the .vsix); each test
 * here is one pytest test there. Environment (all required):
 *   SYNTAXLOCK_CODE_SERVER       the code-server package directory
 *   SYNTAXLOCK_CODE_SERVER_NODE  the Node (24) that runs it
 *   SYNTAXLOCK_CHROMIUM          the Chromium program
 *   SYNTAXLOCK_VSIX              the extension package
 *   SYNTAXLOCK_SERVER            the `syntaxlock` program
 *   SYNTAXLOCK_PYTHON            CPython with syntaxlock (runs the recorder, parses the result)
 *   SYNTAXLOCK_CACHE             the cache of models and mask stores
 *   SYNTAXLOCK_UI_MODEL          the `syntaxlock.model` setting
 *   SYNTAXLOCK_UI_OUT            where the screenshots and the logs go
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, test } from "node:test";
import { CodeServerDirs, CodeServerInstall, installExtension, RunningCodeServer, writeSettings } from "./codeServer";
import { applyItem, InlineExchange, InlineItem, LspRecord, Position } from "./lspRecord";
import { Workbench } from "./workbench";

function required(name: string): string {
  const value = process.env[name];
  assert.ok(value, `${name} is not set: run this suite through tests/test_editor_vscode_real.py`);
  return value;
}

const ROOT = path.resolve(__dirname, "..", "..", "..", "..", "..");
const RECORDER = path.join(ROOT, "tests", "lsp_recorder.py");
const INSTALL: CodeServerInstall = {
  node: required("SYNTAXLOCK_CODE_SERVER_NODE"),
  packageDir: required("SYNTAXLOCK_CODE_SERVER"),
};
const CHROMIUM = required("SYNTAXLOCK_CHROMIUM");
const VSIX = required("SYNTAXLOCK_VSIX");
const SERVER = required("SYNTAXLOCK_SERVER");
const PYTHON = required("SYNTAXLOCK_PYTHON");
const CACHE = required("SYNTAXLOCK_CACHE");
const MODEL = required("SYNTAXLOCK_UI_MODEL");
const OUT = required("SYNTAXLOCK_UI_OUT");

/** Guards against hangs, not timing checks: the first start may convert the model and build the store. */
const READY_MS = 600_000;
const UI_MS = 60_000;
const SUGGESTION_MS = 120_000;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "syntaxlock-vscode-ui-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
const workspace = path.join(tmp, "workspace");
const file = path.join(workspace, "shapes.py");
const recordFile = path.join(tmp, "lsp.jsonl");
const dirs: CodeServerDirs = {
  userData: path.join(tmp, "user-data"),
  extensions: path.join(tmp, "extensions"),
  home: path.join(tmp, "home"),
};
let settingsFile = "";
let installed: string[] = [];
let codeServer: RunningCodeServer | undefined;
let wb: Workbench;

function quote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** `syntaxlock.server.path`: the real server behind the recorder. */
function serverWrapper(): string {
  const wrapper = path.join(tmp, "syntaxlock-recorded");
  fs.writeFileSync(wrapper, `#!/bin/sh\nexec ${[PYTHON, RECORDER, recordFile, "--", SERVER].map(quote).join(" ")} "$@"\n`);
  fs.chmodSync(wrapper, 0o755);
  return wrapper;
}

async function poll<T>(what: string, ms: number, probe: () => T | undefined): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = probe();
    if (v !== undefined) {
      return v;
    }
    if (Date.now() - t0 > ms) {
      throw new Error(`gave up waiting for ${what} after ${ms} ms`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const samePosition = (a: Position, b: Position) => a.line === b.line && a.character === b.character;

/** The last answered inline request at `at`, from the record (the answer may be on its way to the file). */
function answeredAt(at: Position, withItems: boolean): Promise<InlineExchange> {
  return poll(`an answered inline completion request at ${JSON.stringify(at)}`, 30_000, () =>
    LspRecord.read(recordFile)
      .inlineExchanges()
      .reverse()
      .find((e) => samePosition(e.position, at) && e.items !== undefined && (!withItems || e.items.length > 0)),
  );
}

function itemId(item: InlineItem): unknown {
  assert.equal(item.command?.command, "syntaxlock.accepted", "the item carries the acceptance command");
  return item.command!.arguments![0];
}

function cpythonParses(path_: string): { ok: boolean; error: string } {
  const r = spawnSync(PYTHON, ["-c", "import ast, sys; ast.parse(open(sys.argv[1], encoding='utf-8').read())", path_], {
    encoding: "utf8",
  });
  return { ok: r.status === 0, error: r.stderr };
}

/** Waits for ghost text at the cursor and the server's suggestion it shows. */
async function suggestionShown(): Promise<{ ghost: string; exchange: InlineExchange; item: InlineItem }> {
  const ghost = await wb.waitForGhostText(SUGGESTION_MS);
  const exchange = await answeredAt(await wb.cursor(), true);
  return { ghost, exchange, item: exchange.items![0]! };
}

/**
 * Tab, then Ctrl+S; returns the file's text once saved (the test turns auto-save off): changed,
 * and the same on two reads 300 ms apart (VS Code truncates the file before it writes it).
 */
async function acceptAndSave(): Promise<string> {
  const before = fs.readFileSync(file, "utf8");
  await wb.press("Tab");
  await wb.press("Control+S");
  let last = before;
  for (const t0 = Date.now(); Date.now() - t0 < UI_MS; ) {
    await new Promise((r) => setTimeout(r, 300));
    const text = fs.readFileSync(file, "utf8");
    if (text !== before && text === last) {
      return text;
    }
    last = text;
  }
  throw new Error(`the file was not saved within ${UI_MS} ms`);
}

before(async () => {
  fs.mkdirSync(workspace, { recursive: true });
  fs.mkdirSync(OUT, { recursive: true });
  fs.writeFileSync(file, "import math\n\n\n");
  settingsFile = writeSettings(dirs, {
    "syntaxlock.server.path": serverWrapper(),
    "syntaxlock.model": MODEL,
    "syntaxlock.device": "cpu",
  });
  installed = installExtension(INSTALL, dirs, VSIX);
  codeServer = await RunningCodeServer.start(INSTALL, dirs, workspace, { SYNTAXLOCK_CACHE: CACHE }, UI_MS);
  wb = await Workbench.open(CHROMIUM, path.join(tmp, "chromium"), `${codeServer.url}?folder=${encodeURIComponent(workspace)}`, UI_MS);
  await wb.recordStatus();
  await wb.openFile("shapes.py");
  await wb.runCommand("View: Close Primary Side Bar");
});

/** The files VS Code writes the extension's output channel to (one per extension host). */
function outputChannelFiles(): string[] {
  const logs = path.join(dirs.userData, "logs");
  return fs.existsSync(logs)
    ? fs
        .readdirSync(logs, { recursive: true, encoding: "utf8" })
        .filter((f) => f.endsWith(path.join("syntaxlock.syntaxlock", "syntaxlock.log")))
        .map((f) => path.join(logs, f))
    : [];
}

after(async () => {
  try {
    // the logs, for a failure: code-server's, the extension's output channel, the LSP record
    if (codeServer !== undefined) {
      fs.writeFileSync(path.join(OUT, "code-server.log"), codeServer.log);
    }
    for (const [i, f] of outputChannelFiles().entries()) {
      fs.copyFileSync(f, path.join(OUT, `output-channel-${i}.log`));
    }
    if (fs.existsSync(recordFile)) {
      fs.copyFileSync(recordFile, path.join(OUT, "lsp.jsonl"));
    }
    console.log(`# screenshots and logs: ${OUT}`);
  } finally {
    await wb?.close();
    await codeServer?.stop();
  }
});

test("code-server has the extension installed", () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, "editors", "vscode", "package.json"), "utf8")) as {
    publisher: string;
    name: string;
    version: string;
  };
  assert.ok(
    installed.includes(`${manifest.publisher}.${manifest.name}@${manifest.version}`),
    `installed: ${JSON.stringify(installed)}`,
  );
});

test("the status-bar item goes from loading to ready", async () => {
  const ready = await wb.waitForStatus("check", "ready", READY_MS);
  assert.equal(ready.text, "syntaxlock");
  const history = await wb.statusHistory();
  const firstReady = history.findIndex((s) => s.icon === "check");
  const loading = history.slice(0, firstReady).filter((s) => s.icon === "sync" && s.label.includes("loading"));
  assert.ok(loading.length > 0, `no loading state before ready: ${JSON.stringify(history)}`);
  assert.match(loading[loading.length - 1]!.label, /loading/);
});

let first: { ghost: string; exchange: InlineExchange; item: InlineItem } | undefined;

test("typing brings ghost text: the server's suggestion, drawn after the cursor", async () => {
  await wb.press("Control+End");
  await wb.type("def circle_area(radius):");
  await wb.press("Enter");
  first = await suggestionShown();
  const cursor = await wb.cursor();
  assert.deepEqual(first.item.range, { start: cursor, end: cursor }, "the suggestion is inserted at the cursor");
  assert.equal(first.ghost, first.item.insertText, "the ghost text is the server's suggestion");
  assert.ok(first.ghost.trim().length > 0);
  await wb.screenshot(path.join(OUT, "vscode-ghost-text.png"));
});

test("Tab accepts: the editor holds what the server offered, the file parses, the acceptance is reported", async () => {
  assert.ok(first, "a suggestion was shown");
  const text = await acceptAndSave();
  assert.equal(text, applyItem(first.exchange.text, first.item));
  const parsed = cpythonParses(file);
  assert.ok(parsed.ok, `the file does not parse:\n${text}\n${parsed.error}`);
  await wb.screenshot(path.join(OUT, "vscode-accepted.png"));
  const id = itemId(first.item);
  await poll("syntaxlock.accepted", 30_000, () =>
    LspRecord.read(recordFile)
      .commandArguments("syntaxlock.accepted")
      .some((args) => args[0] === id)
      ? true
      : undefined,
  );
});

test("inside auto-closed brackets the suggestion replaces the closing ones, and the file parses", async () => {
  await wb.press("Control+End");
  await wb.press("Enter");
  await wb.type("print(circle_area(");
  const shown = await suggestionShown();
  const cursor = await wb.cursor();
  // VS Code closed both brackets: the line ends in `))` after the cursor
  const line = shown.exchange.text.split("\n")[cursor.line]!;
  assert.equal(line.slice(cursor.character), "))", `the line: ${JSON.stringify(line)}`);
  const text = await acceptAndSave();
  assert.equal(text, applyItem(shown.exchange.text, shown.item));
  const parsed = cpythonParses(file);
  assert.ok(parsed.ok, `the file does not parse:\n${text}\n${parsed.error}`);
});

test("Escape hides the ghost text and the dismissal is reported", async () => {
  await wb.press("Control+End");
  await wb.press("Enter");
  await wb.type("area = ");
  const shown = await suggestionShown();
  await wb.press("Escape");
  await wb.waitForNoGhostText(UI_MS);
  const id = itemId(shown.item);
  await poll("syntaxlock.dismissed", 30_000, () =>
    LspRecord.read(recordFile)
      .commandArguments("syntaxlock.dismissed")
      .some((args) => args[0] === id)
      ? true
      : undefined,
  );
  // finish the line by hand, so that the text before the next cursor parses
  await wb.type("0");
});

test("Toggle Completions from the Command Palette stops suggestions, and again brings them back", async () => {
  await wb.runCommand("syntaxlock: Toggle Completions");
  try {
    const off = await wb.waitForStatus("circle-slash", "off", UI_MS);
    assert.match(off.text, /syntaxlock off/);
    await wb.press("Control+End");
    await wb.press("Enter");
    await wb.type("perimeter = ");
    const asked = await answeredAt(await wb.cursor(), false);
    assert.deepEqual(asked.items, [], "the server offers nothing while off");
    assert.equal(await wb.ghostText(), null, "no ghost text while off");

    await wb.runCommand("syntaxlock: Toggle Completions");
    await wb.waitForStatus("check", "ready", READY_MS);
    // ask again at the same place: delete the space and type it again
    await wb.press("Backspace");
    await wb.type(" ");
    const shown = await suggestionShown();
    assert.ok(shown.ghost.length > 0);
  } finally {
    // should it fail while off: completions on again, so that the next test starts as it would have
    if ((await wb.statusItem())?.icon === "circle-slash") {
      await wb.runCommand("syntaxlock: Toggle Completions");
      await wb.waitForStatus("check", "ready", READY_MS);
    }
  }
});

test("a bad setting shows the server's message, and the server goes on", async () => {
  const settings = JSON.parse(fs.readFileSync(settingsFile, "utf8")) as Record<string, unknown>;
  fs.writeFileSync(settingsFile, JSON.stringify({ ...settings, "syntaxlock.maxTokens": 0 }, null, 2));
  const message = await poll("the server's window/showMessage", 60_000, () =>
    LspRecord.read(recordFile)
      .shownMessages()
      .find((m) => m.includes("maxTokens")),
  );
  const toast = await wb.page.waitForFunction(
    `[...document.querySelectorAll('.notifications-toasts .notification-list-item-message')].map((e) => e.textContent).find((t) => t.includes(${JSON.stringify(message)})) || null`,
    undefined,
    { timeout: UI_MS, polling: 100 },
  );
  assert.ok(String(await toast.jsonValue()).includes(message));
  fs.writeFileSync(settingsFile, JSON.stringify(settings, null, 2));
  const status = await wb.statusItem();
  assert.equal(status?.icon, "check", `the server is still ready: ${JSON.stringify(status)}`);
});

test("each line the server logs shows once in the output channel", async () => {
  const sent = LspRecord.read(recordFile).loggedMessages();
  assert.ok(sent.some((m) => m.includes("syntaxlock disabled")), `window/logMessage: ${JSON.stringify(sent)}`);
  const times = (text: string, m: string) => text.split(m).length - 1;
  const expected = (m: string) => sent.filter((s) => s === m).length;
  // VS Code writes the channel's file behind: wait until it holds every message, then count
  const channel = await poll("the output channel's file holding every window/logMessage", 60_000, () => {
    const text = outputChannelFiles()
      .map((f) => fs.readFileSync(f, "utf8"))
      .join("\n");
    return sent.every((m) => times(text, m) >= expected(m)) ? text : undefined;
  });
  for (const m of new Set(sent)) {
    assert.equal(times(channel, m), expected(m), `${JSON.stringify(m)} in the output channel`);
  }
});
