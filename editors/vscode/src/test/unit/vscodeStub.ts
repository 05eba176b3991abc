/**
 * A stand-in for the `vscode` module, enough of it for the extension: settings (with the
 * defaults of package.json, as VS Code reads them), commands, messages, an output channel and a
 * status-bar item, all recording what happened. Importing this file installs it: a later
 * `require("vscode")` gets the stub.
 */
import * as fs from "node:fs";
import * as path from "node:path";

type Listener<T> = (e: T) => unknown;

export class Disposable {
  constructor(private readonly fn: () => void) {}
  dispose(): void {
    this.fn();
  }
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export const StatusBarAlignment = { Left: 1, Right: 2 } as const;
export const ConfigurationTarget = { Global: 1, Workspace: 2, WorkspaceFolder: 3 } as const;

export class FakeLog {
  readonly lines: string[] = [];
  shown = 0;
  constructor(readonly name: string) {}
  private add(level: string, msg: string): void {
    this.lines.push(`[${level}] ${msg}`);
  }
  trace(m: string): void { this.add("trace", m); }
  debug(m: string): void { this.add("debug", m); }
  info(m: string): void { this.add("info", m); }
  warn(m: string): void { this.add("warn", m); }
  error(m: string | Error): void { this.add("error", String(m)); }
  append(m: string): void { this.lines.push(m); }
  appendLine(m: string): void { this.lines.push(m); }
  replace(m: string): void { this.lines.splice(0, this.lines.length, m); }
  clear(): void { this.lines.splice(0); }
  show(): void { this.shown++; }
  hide(): void {}
  dispose(): void {}
}

export class FakeStatusBarItem {
  text = "";
  tooltip: string | undefined;
  command: string | undefined;
  name: string | undefined;
  backgroundColor: ThemeColor | undefined;
  visible = false;
  constructor(readonly id: string, readonly alignment: number, readonly priority: number) {}
  show(): void { this.visible = true; }
  hide(): void { this.visible = false; }
  dispose(): void { this.visible = false; }
}

interface Message {
  level: "error" | "warning" | "information";
  text: string;
  items: string[];
}

/** package.json's setting defaults, as VS Code applies them. */
function packageDefaults(): Map<string, unknown> {
  const pkgPath = path.resolve(__dirname, "..", "..", "..", "package.json");
  const pkg = JSON.parse(fs.readFileSync(pkgPath, "utf8")) as {
    contributes: { configuration: { properties: Record<string, { default?: unknown }> } };
  };
  const out = new Map<string, unknown>();
  for (const [key, spec] of Object.entries(pkg.contributes.configuration.properties)) {
    out.set(key, spec.default);
  }
  return out;
}

class State {
  defaults = packageDefaults();
  /** Values the user set, by full key and target. */
  user = new Map<string, { value: unknown; target: number }>();
  commands = new Map<string, (...args: unknown[]) => unknown>();
  executed: { command: string; args: unknown[] }[] = [];
  messages: Message[] = [];
  /** What the next message's buttons return. */
  messageAnswer: string | undefined = undefined;
  configListeners: Listener<{ affectsConfiguration(section: string): boolean }>[] = [];
  logs: FakeLog[] = [];
  statusItems: FakeStatusBarItem[] = [];
  workspaceFolders: { uri: { fsPath: string } }[] | undefined = undefined;
  selectionListeners: Listener<FakeSelectionEvent>[] = [];
  activeEditorListeners: Listener<FakeEditor | undefined>[] = [];
  activeTextEditor: FakeEditor | undefined = undefined;
}

export interface FakeEditor {
  document: { uri: { toString(): string }; version: number; languageId: string };
  selection: { active: { line: number; character: number } };
}

export interface FakeSelectionEvent {
  textEditor: FakeEditor;
  selections: { active: { line: number; character: number } }[];
}

/** An editor of `uri` with its cursor at line:character. */
export function editor(uri: string, languageId: string, version: number, line: number, character: number): FakeEditor {
  return { document: { uri: { toString: () => uri }, version, languageId }, selection: { active: { line, character } } };
}

/** The user moves the cursor of `ed` (VS Code's onDidChangeTextEditorSelection). */
export function moveCursor(ed: FakeEditor, line: number, character: number): void {
  ed.selection = { active: { line, character } };
  for (const l of [...state.selectionListeners]) {
    l({ textEditor: ed, selections: [ed.selection] });
  }
}

/** `ed` comes to the front (onDidChangeActiveTextEditor). */
export function activate(ed: FakeEditor | undefined): void {
  state.activeTextEditor = ed;
  for (const l of [...state.activeEditorListeners]) {
    l(ed);
  }
}

function listen<T>(list: () => Listener<T>[]) {
  return (listener: Listener<T>): Disposable => {
    const owner = list();
    owner.push(listener);
    return new Disposable(() => {
      const i = owner.indexOf(listener);
      if (i >= 0) {
        owner.splice(i, 1);
      }
    });
  };
}

export let state = new State();

export function reset(): void {
  state = new State();
}

class Configuration {
  constructor(private readonly section: string) {}
  private full(key: string): string {
    return this.section ? `${this.section}.${key}` : key;
  }
  get<T>(key: string, fallback?: T): T | undefined {
    const full = this.full(key);
    if (state.user.has(full)) {
      return state.user.get(full)!.value as T;
    }
    if (state.defaults.has(full)) {
      return state.defaults.get(full) as T;
    }
    return fallback;
  }
  has(key: string): boolean {
    return state.user.has(this.full(key)) || state.defaults.has(this.full(key));
  }
  inspect<T>(key: string): { key: string; defaultValue?: T; globalValue?: T; workspaceValue?: T; workspaceFolderValue?: T } {
    const full = this.full(key);
    const set = state.user.get(full);
    return {
      key: full,
      defaultValue: state.defaults.get(full) as T,
      globalValue: set?.target === ConfigurationTarget.Global ? (set.value as T) : undefined,
      workspaceValue: set?.target === ConfigurationTarget.Workspace ? (set.value as T) : undefined,
      workspaceFolderValue: set?.target === ConfigurationTarget.WorkspaceFolder ? (set.value as T) : undefined,
    };
  }
  update(key: string, value: unknown, target: number = ConfigurationTarget.Global): Promise<void> {
    setSetting(this.full(key), value, target);
    return Promise.resolve();
  }
}

/** Sets a setting as the user would, and fires onDidChangeConfiguration. */
export function setSetting(full: string, value: unknown, target: number = ConfigurationTarget.Global): void {
  if (value === undefined) {
    state.user.delete(full);
  } else {
    state.user.set(full, { value, target });
  }
  const event = {
    affectsConfiguration: (section: string) => full === section || full.startsWith(`${section}.`),
  };
  for (const l of [...state.configListeners]) {
    l(event);
  }
}

function message(level: Message["level"]) {
  return (text: string, ...items: string[]): Promise<string | undefined> => {
    state.messages.push({ level, text, items });
    return Promise.resolve(state.messageAnswer !== undefined && items.includes(state.messageAnswer) ? state.messageAnswer : undefined);
  };
}

export const window = {
  createOutputChannel(name: string): FakeLog {
    const log = new FakeLog(name);
    state.logs.push(log);
    return log;
  },
  createStatusBarItem(id: string, alignment: number, priority: number): FakeStatusBarItem {
    const item = new FakeStatusBarItem(id, alignment, priority);
    state.statusItems.push(item);
    return item;
  },
  onDidChangeTextEditorSelection: listen<FakeSelectionEvent>(() => state.selectionListeners),
  onDidChangeActiveTextEditor: listen<FakeEditor | undefined>(() => state.activeEditorListeners),
  get activeTextEditor(): FakeEditor | undefined {
    return state.activeTextEditor;
  },
  showErrorMessage: message("error"),
  showWarningMessage: message("warning"),
  showInformationMessage: message("information"),
};

export const commands = {
  registerCommand(id: string, fn: (...args: unknown[]) => unknown): Disposable {
    if (state.commands.has(id)) {
      throw new Error(`command '${id}' already exists`);
    }
    state.commands.set(id, fn);
    const owner = state;
    return new Disposable(() => {
      if (owner.commands.get(id) === fn) {
        owner.commands.delete(id);
      }
    });
  },
  executeCommand(id: string, ...args: unknown[]): Promise<unknown> {
    state.executed.push({ command: id, args });
    const fn = state.commands.get(id);
    return Promise.resolve(fn ? fn(...args) : undefined);
  },
};

export const workspace = {
  getConfiguration(section = ""): Configuration {
    return new Configuration(section);
  },
  onDidChangeConfiguration(listener: Listener<{ affectsConfiguration(section: string): boolean }>): Disposable {
    state.configListeners.push(listener);
    const owner = state;
    return new Disposable(() => {
      const i = owner.configListeners.indexOf(listener);
      if (i >= 0) {
        owner.configListeners.splice(i, 1);
      }
    });
  },
  get workspaceFolders(): { uri: { fsPath: string } }[] | undefined {
    return state.workspaceFolders;
  },
};

const stub = { Disposable, ThemeColor, StatusBarAlignment, ConfigurationTarget, window, commands, workspace };

// install: `require("vscode")` returns the stub from now on
// eslint-disable-next-line @typescript-eslint/no-require-imports
const Module = require("node:module") as {
  _load(request: string, parent: unknown, isMain: boolean): unknown;
};
const load = Module._load;
Module._load = function (this: unknown, request: string, parent: unknown, isMain: boolean): unknown {
  if (request === "vscode") {
    return stub;
  }
  return load.call(this, request, parent, isMain);
};
