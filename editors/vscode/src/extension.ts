/**
 * The syntaxlock extension: starts `syntaxlock serve --stdio` for Python files, shows the
 * server's state in the status bar, and offers commands to toggle, restart and show the log.
 */
import * as vscode from "vscode";
import {
  ClientFactory,
  ClientRunState,
  createLanguageClient,
  Disposable,
  LspClient,
  makeMiddleware,
} from "./client";
import { CURSOR_NOTIFICATION, CursorParams, CursorReporter } from "./cursor";
import { Environment, nodeEnvironment, resolveServerCommand, ServerCommand } from "./serverCommand";
import { classifyChange, clientSettings, serverOptions, ServerOptions, SettingsReader } from "./settings";
import { ClientState, parseServerStatus, statusView } from "./status";
import { ACCEPTED_COMMAND, CompletionTracker, DISMISSED_COMMAND, ItemId } from "./telemetry";

export const STATUS_NOTIFICATION = "syntaxlock/status";

export interface Dependencies {
  createClient: ClientFactory;
  environment(): Environment;
}

function settingsReader(): SettingsReader {
  const cfg = vscode.workspace.getConfiguration("syntaxlock");
  return (key) => cfg.get(key);
}

/** The extension's state and behaviour; `activate` makes one. */
export class SyntaxlockExtension implements vscode.Disposable {
  readonly output: vscode.LogOutputChannel;
  readonly statusItem: vscode.StatusBarItem;
  readonly tracker = new CompletionTracker();
  readonly cursor = new CursorReporter((params) => this.sendCursor(params));
  private client: LspClient | undefined;
  private clientDisposables: Disposable[] = [];
  private state: ClientState = { kind: "stopped" };
  private stopping = false;
  /** Start, stop and restart run one after the other. */
  private queue: Promise<unknown> = Promise.resolve();
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly deps: Dependencies) {
    this.output = vscode.window.createOutputChannel("syntaxlock", { log: true });
    this.statusItem = vscode.window.createStatusBarItem("syntaxlock.status", vscode.StatusBarAlignment.Right, 100);
    this.statusItem.name = "syntaxlock";
    this.disposables.push(
      this.output,
      this.statusItem,
      vscode.commands.registerCommand("syntaxlock.toggle", () => this.toggle()),
      vscode.commands.registerCommand("syntaxlock.restart", () => this.restart()),
      vscode.commands.registerCommand("syntaxlock.showLog", () => this.output.show(true)),
      vscode.commands.registerCommand("syntaxlock.showStats", () => this.showStats()),
      vscode.commands.registerCommand("syntaxlock.dismiss", () => this.dismissVisible()),
      vscode.workspace.onDidChangeConfiguration((e) => this.onConfigurationChanged(e)),
      vscode.window.onDidChangeTextEditorSelection((e) => {
        const active = e.selections[0]?.active;
        if (active !== undefined) {
          this.cursor.moved(e.textEditor.document, active);
        }
      }),
      vscode.window.onDidChangeActiveTextEditor((editor) => {
        if (editor !== undefined) {
          this.cursor.moved(editor.document, editor.selection.active);
        }
      }),
      this.cursor,
    );
    this.render();
    this.statusItem.show();
  }

  get clientState(): ClientState {
    return this.state;
  }

  get languageClient(): LspClient | undefined {
    return this.client;
  }

  private setState(state: ClientState): void {
    this.state = state;
    this.render();
  }

  private render(): void {
    const view = statusView(this.state);
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.command = view.command;
    this.statusItem.backgroundColor = view.background ? new vscode.ThemeColor(view.background) : undefined;
  }

  private serverOptions(): ServerOptions {
    return serverOptions(settingsReader());
  }

  private serialized<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work, work);
    this.queue = next.catch(() => undefined);
    return next;
  }

  start(): Promise<void> {
    return this.serialized(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.serialized(() => this.doStop());
  }

  restart(): Promise<void> {
    return this.serialized(async () => {
      await this.doStop();
      await this.doStart();
    });
  }

  private async doStart(): Promise<void> {
    if (this.client !== undefined) {
      return;
    }
    const resolved = resolveServerCommand(clientSettings(settingsReader()), this.deps.environment());
    if (!resolved.ok) {
      this.output.error(`${resolved.message} ${resolved.fix}`);
      this.setState({ kind: "stopped", error: resolved.message });
      void this.showStartError(resolved.message, resolved.fix);
      return;
    }
    this.output.info(`starting ${[resolved.command, ...resolved.args].join(" ")} (found through ${resolved.origin})`);
    this.setState({ kind: "starting" });
    let client: LspClient;
    try {
      client = await this.deps.createClient(resolved, {
        initializationOptions: this.serverOptions(),
        middleware: makeMiddleware(this.tracker, (ids) => this.report(DISMISSED_COMMAND, ids), () => this.serverOptions()),
        outputChannel: this.output,
      });
    } catch (err) {
      return this.startFailed(resolved, err);
    }
    this.client = client;
    this.stopping = false;
    this.clientDisposables.push(
      client.onNotification(STATUS_NOTIFICATION, (params) => {
        const status = parseServerStatus(params);
        if (status === undefined) {
          this.output.warn(`ignored a malformed ${STATUS_NOTIFICATION} notification: ${JSON.stringify(params)}`);
          return;
        }
        if (this.client === client) {
          this.setState({ kind: "running", server: status });
        }
      }),
      client.onDidChangeState((e) => {
        if (this.client !== client) {
          return;
        }
        if (e.newState === ClientRunState.Stopped && !this.stopping) {
          this.setState({ kind: "stopped", error: "the server exited (see the log)" });
        } else if (e.newState === ClientRunState.Running && this.state.kind !== "running") {
          this.setState({ kind: "running" });
        }
      }),
    );
    try {
      await client.start();
    } catch (err) {
      this.disposeClientListeners();
      this.client = undefined;
      return this.startFailed(resolved, err);
    }
    this.registerMissingCommands(client);
    if (this.state.kind !== "running") {
      this.setState({ kind: "running" });
    }
    // the new server learns where the cursor is now
    this.cursor.reset();
    const editor = vscode.window.activeTextEditor;
    if (editor !== undefined) {
      this.cursor.moved(editor.document, editor.selection.active);
    }
  }

  /** Sends a cursor report to the running server (see cursor.ts). */
  private sendCursor(params: CursorParams): void {
    const client = this.client;
    if (client === undefined || !client.isRunning()) {
      return;
    }
    client
      .sendNotification(CURSOR_NOTIFICATION, params)
      .catch((err: unknown) => this.output.warn(`${CURSOR_NOTIFICATION}: ${String(err)}`));
  }

  private startFailed(command: ServerCommand, err: unknown): void {
    const reason = err instanceof Error ? err.message : String(err);
    const message = `The syntaxlock language server did not start (${command.command}): ${reason}`;
    const fix =
      "Check that syntaxlock.server.path (or syntaxlock.server.pythonPath) names a working syntaxlock " +
      "installation; the log has the server's own messages.";
    this.output.error(`${message} ${fix}`);
    this.setState({ kind: "stopped", error: reason });
    void this.showStartError(message, fix);
  }

  private async showStartError(message: string, fix: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(`${message} ${fix}`, "Open Settings", "Show Log");
    if (choice === "Open Settings") {
      await vscode.commands.executeCommand("workbench.action.openSettings", "syntaxlock.server");
    } else if (choice === "Show Log") {
      this.output.show(true);
    }
  }

  /**
   * The server lists its commands in executeCommandProvider and the language client registers
   * them; should `syntaxlock.accepted` be missing there, VS Code would fail on every acceptance,
   * so the extension registers it itself (it then only settles the item).
   */
  private registerMissingCommands(client: LspClient): void {
    const commands = client.initializeResult?.capabilities.executeCommandProvider?.commands ?? [];
    if (!commands.includes(ACCEPTED_COMMAND)) {
      this.output.warn(`the server does not offer ${ACCEPTED_COMMAND}; acceptances are not reported`);
      this.clientDisposables.push(
        vscode.commands.registerCommand(ACCEPTED_COMMAND, (id: unknown) => this.tracker.accepted(id)),
      );
    }
  }

  private disposeClientListeners(): void {
    for (const d of this.clientDisposables.splice(0)) {
      d.dispose();
    }
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    if (client === undefined) {
      this.setState({ kind: "stopped" });
      return;
    }
    this.stopping = true;
    this.tracker.dismissAll();
    try {
      if (client.isRunning()) {
        await client.stop(5_000);
      }
    } catch (err) {
      this.output.warn(`stopping the server: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      this.disposeClientListeners();
      this.client = undefined;
      this.setState({ kind: "stopped" });
    }
  }

  /** Turns completions on or off (the `syntaxlock.enabled` setting, where it is set). */
  async toggle(): Promise<void> {
    const cfg = vscode.workspace.getConfiguration("syntaxlock");
    const enabled = cfg.get<boolean>("enabled", true);
    const inspected = cfg.inspect<boolean>("enabled");
    const target =
      inspected?.workspaceFolderValue !== undefined
        ? vscode.ConfigurationTarget.WorkspaceFolder
        : inspected?.workspaceValue !== undefined
          ? vscode.ConfigurationTarget.Workspace
          : vscode.ConfigurationTarget.Global;
    await cfg.update("enabled", !enabled, target);
    if (this.client === undefined && !enabled) {
      // turned on while the server is not running (it failed, or was stopped): try again
      await this.start();
    }
  }

  private onConfigurationChanged(e: vscode.ConfigurationChangeEvent): void {
    const change = classifyChange((key) => e.affectsConfiguration(`syntaxlock.${key}`));
    if (change === "restart") {
      this.output.info("the server settings changed: restarting the server");
      void this.restart();
    } else if (change === "server-options") {
      const client = this.client;
      if (client !== undefined && client.isRunning()) {
        void client
          .sendNotification("workspace/didChangeConfiguration", { settings: { syntaxlock: this.serverOptions() } })
          .catch((err: unknown) => this.output.warn(`sending the settings: ${String(err)}`));
      }
    }
  }

  /** Reports `ids` with the server's telemetry command (`syntaxlock.dismissed`, ...). */
  report(command: string, ids: readonly ItemId[]): void {
    const client = this.client;
    if (client === undefined || !client.isRunning()) {
      return;
    }
    for (const id of ids) {
      client
        .sendRequest("workspace/executeCommand", { command, arguments: [id] })
        .catch((err: unknown) => this.output.warn(`${command} ${String(id)}: ${String(err)}`));
    }
  }

  /** Escape while a suggestion is visible: hide it and report it dismissed. */
  async dismissVisible(): Promise<void> {
    await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
    const gone = this.tracker.dismissAll();
    this.report(DISMISSED_COMMAND, gone);
  }

  /** Shows the server's counters (`syntaxlock.stats`). */
  async showStats(): Promise<void> {
    const client = this.client;
    if (client === undefined || !client.isRunning()) {
      void vscode.window.showWarningMessage("syntaxlock: the server is not running.");
      return;
    }
    const stats = (await client.sendRequest("workspace/executeCommand", {
      command: "syntaxlock.stats",
      arguments: [],
    })) as Record<string, unknown> | null;
    void vscode.window.showInformationMessage(formatStats(stats));
  }

  dispose(): void {
    void this.stop();
    for (const d of this.disposables.splice(0)) {
      d.dispose();
    }
  }
}

/** One line for the stats message. */
export function formatStats(stats: Record<string, unknown> | null | undefined): string {
  if (!stats) {
    return "syntaxlock: the server sent no statistics.";
  }
  const num = (k: string): number => (typeof stats[k] === "number" ? (stats[k] as number) : 0);
  const rate = (num("acceptRate") * 100).toFixed(0);
  const latency = typeof stats.meanLatencyMs === "number" ? `${stats.meanLatencyMs.toFixed(0)} ms` : "n/a";
  return (
    `syntaxlock: ${num("shown")} shown, ${num("accepted")} accepted (${rate}%), ` +
    `${num("dismissed")} dismissed; mean latency ${latency}.`
  );
}

let current: SyntaxlockExtension | undefined;

export async function activate(
  context: vscode.ExtensionContext,
  deps: Dependencies = {
    createClient: createLanguageClient,
    environment: () => nodeEnvironment((vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath)),
  },
): Promise<SyntaxlockExtension> {
  const ext = new SyntaxlockExtension(deps);
  current = ext;
  context.subscriptions.push(ext);
  await ext.start();
  return ext;
}

export async function deactivate(): Promise<void> {
  const ext = current;
  current = undefined;
  if (ext !== undefined) {
    await ext.stop();
  }
}
