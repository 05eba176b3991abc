/**
 * code-server (VS Code served to a browser) for the real-editor test: a private user-data and
 * extensions directory, our .vsix installed there, the server on a free loopback port without
 * authentication, and its whole process group (the extension host, the language server) ended
 * at the end.
 */
import { ChildProcess, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";

export interface CodeServerInstall {
  /** Node 24, which code-server needs. */
  node: string;
  /** The code-server package directory (its `out/node/entry.js` is the program). */
  packageDir: string;
}

export interface CodeServerDirs {
  /** Holds User/settings.json, the logs and the state. */
  userData: string;
  extensions: string;
  /** XDG directories and the config file, so that nothing lands in the user's home. */
  home: string;
}

/**
 * The settings for the test. VS Code's own go to the user settings: quiet (no welcome page, no
 * trust prompt, no AI side bar) and no auto-save (code-server saves after a delay by default).
 * `remote` go to the machine ("Remote") settings: code-server's window is a remote one, where
 * settings of machine scope (`syntaxlock.server.path`, `syntaxlock.model`, ...) are not read from
 * the user settings. Returns the machine settings file.
 */
export function writeSettings(dirs: CodeServerDirs, remote: Record<string, unknown>): string {
  const user = {
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": false,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "security.workspace.trust.enabled": false,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoUpdate": false,
    "extensions.autoCheckUpdates": false,
    "extensions.ignoreRecommendations": true,
    "chat.disableAIFeatures": true,
    "git.enabled": false,
    "files.autoSave": "off",
  };
  const write = (file: string, settings: Record<string, unknown>) => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, JSON.stringify(settings, null, 2));
    return file;
  };
  write(path.join(dirs.userData, "User", "settings.json"), user);
  return write(path.join(dirs.userData, "Machine", "settings.json"), remote);
}

function env(dirs: CodeServerDirs, extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return {
    ...process.env,
    XDG_CONFIG_HOME: path.join(dirs.home, "config"),
    XDG_DATA_HOME: path.join(dirs.home, "data"),
    XDG_CACHE_HOME: path.join(dirs.home, "cache"),
    ...extra,
  };
}

function commonArgs(install: CodeServerInstall, dirs: CodeServerDirs): string[] {
  return [
    path.join(install.packageDir, "out", "node", "entry.js"),
    "--user-data-dir",
    dirs.userData,
    "--extensions-dir",
    dirs.extensions,
  ];
}

/** Installs `vsix`; returns `--list-extensions --show-versions` afterwards. */
export function installExtension(install: CodeServerInstall, dirs: CodeServerDirs, vsix: string): string[] {
  const run = (...args: string[]) => {
    const r = spawnSync(install.node, [...commonArgs(install, dirs), ...args], {
      env: env(dirs, {}),
      encoding: "utf8",
      timeout: 120_000,
    });
    if (r.status !== 0) {
      throw new Error(`code-server ${args.join(" ")} failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
    }
    return r.stdout;
  };
  run("--install-extension", vsix, "--force");
  return run("--list-extensions", "--show-versions")
    .split("\n")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/**
 * Ends the process group `pgid` when this process ends, also when it is ended by a signal (the
 * test runner's timeout, pytest's): a group left running would hold a port and a model in memory.
 */
function endWithThisProcess(pgid: number): void {
  const end = () => {
    try {
      process.kill(-pgid, "SIGKILL");
    } catch {
      // the group is gone
    }
  };
  process.on("exit", end);
  for (const [signal, code] of [["SIGTERM", 143], ["SIGINT", 130]] as const) {
    process.once(signal, () => {
      end();
      process.exit(code);
    });
  }
}

export class RunningCodeServer {
  private constructor(
    readonly url: string,
    private readonly proc: ChildProcess,
    private readonly output: () => string,
  ) {}

  /** Starts code-server on `folder`; resolves when it listens (its address from its log). */
  static async start(
    install: CodeServerInstall,
    dirs: CodeServerDirs,
    folder: string,
    extraEnv: NodeJS.ProcessEnv,
    timeoutMs: number,
  ): Promise<RunningCodeServer> {
    const config = path.join(dirs.home, "code-server.yaml");
    fs.mkdirSync(dirs.home, { recursive: true });
    fs.writeFileSync(config, "bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n");
    const args = [
      ...commonArgs(install, dirs),
      "--config",
      config,
      "--disable-telemetry",
      "--disable-update-check",
      "--disable-workspace-trust",
      "--disable-getting-started-override",
      "--ignore-last-opened",
      folder,
    ];
    // its own process group, so that stop() ends the extension host and the language server too
    const proc = spawn(install.node, args, { env: env(dirs, extraEnv), detached: true, stdio: ["ignore", "pipe", "pipe"] });
    endWithThisProcess(proc.pid!);
    let log = "";
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`code-server did not listen within ${timeoutMs} ms:\n${log}`)), timeoutMs);
      const onData = (d: Buffer) => {
        log += d.toString();
        const m = /HTTP server listening on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(log);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      };
      proc.stdout!.on("data", onData);
      proc.stderr!.on("data", onData);
      proc.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`code-server exited (${code}) before listening:\n${log}`));
      });
    });
    return new RunningCodeServer(url, proc, () => log);
  }

  /** code-server's own log so far. */
  get log(): string {
    return this.output();
  }

  /** Ends code-server and everything it started (SIGTERM, then SIGKILL after `graceMs`). */
  async stop(graceMs = 5_000): Promise<void> {
    const pid = this.proc.pid;
    if (pid === undefined || this.proc.exitCode !== null) {
      return;
    }
    const exited = new Promise<void>((resolve) => this.proc.on("exit", () => resolve()));
    const signal = (s: NodeJS.Signals) => {
      try {
        process.kill(-pid, s);
      } catch {
        // the group is gone
      }
    };
    signal("SIGTERM");
    const timer = setTimeout(() => signal("SIGKILL"), graceMs);
    await exited;
    clearTimeout(timer);
    // what is left of the group (the language server may take its time over its shutdown)
    signal("SIGKILL");
  }
}
