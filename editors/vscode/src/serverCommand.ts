/**
 * Finding the command that starts `syntaxlock serve --stdio`, or saying clearly why there is
 * none and how to fix it. The file system and the Python probe come in as functions, so that
 * the rules are testable without a real environment.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import type { ClientSettings } from "./settings";

export interface Environment {
  platform: NodeJS.Platform;
  /** The PATH variable. */
  pathVariable: string;
  home: string;
  workspaceFolders: readonly string[];
  isExecutableFile(file: string): boolean;
  /**
   * Whether `python` can run the server: null when it can, else what went wrong (the
   * interpreter's own error, e.g. `ModuleNotFoundError: No module named 'lsp_server'`).
   */
  probePython(python: string): string | null;
}

export interface ServerCommand {
  ok: true;
  command: string;
  args: string[];
  /** How it was found, for the log. */
  origin: string;
}

export interface ServerCommandError {
  ok: false;
  /** What is wrong. */
  message: string;
  /** What to do about it. */
  fix: string;
}

export const INSTALL_HINT =
  "Install syntaxlock into a Python environment (`pip install syntaxlock`, or `make setup` in a " +
  "syntaxlock checkout, which creates .venv/)";

/**
 * The server settings have machine scope, and in a remote window (code-server, SSH, WSL, a
 * container) VS Code reads no machine settings from the user settings: set there, they are
 * silently ignored (the real-editor test in code-server met this).
 */
export const REMOTE_HINT =
  "In a remote window (code-server, SSH, WSL, a container) set it in the Remote settings or the " +
  "workspace's: VS Code ignores machine settings such as syntaxlock.server.path in the user settings there.";

function serveArgs(settings: ClientSettings): string[] {
  return ["serve", "--stdio", "--log-level", settings.logLevel];
}

function expand(p: string, env: Environment): string {
  let out = p;
  if (out === "~" || out.startsWith("~/")) {
    out = path.join(env.home, out.slice(1));
  }
  const folder = env.workspaceFolders[0];
  if (folder !== undefined) {
    out = out.split("${workspaceFolder}").join(folder);
  }
  return out;
}

function exeNames(name: string, env: Environment): string[] {
  return env.platform === "win32" ? [`${name}.exe`, `${name}.cmd`, name] : [name];
}

/** The first executable called `name` on PATH, or undefined. */
export function which(name: string, env: Environment): string | undefined {
  const sep = env.platform === "win32" ? ";" : ":";
  for (const dir of env.pathVariable.split(sep)) {
    if (!dir) {
      continue;
    }
    for (const candidate of exeNames(name, env)) {
      const file = path.join(dir, candidate);
      if (env.isExecutableFile(file)) {
        return file;
      }
    }
  }
  return undefined;
}

function hasSeparator(p: string): boolean {
  return p.includes("/") || p.includes("\\");
}

/** A configured executable: an existing file, or a bare name found on PATH. */
function locate(configured: string, env: Environment): string | undefined {
  const p = expand(configured, env);
  if (hasSeparator(p)) {
    return env.isExecutableFile(p) ? p : undefined;
  }
  return which(p, env);
}

function venvCandidates(env: Environment): string[] {
  const out: string[] = [];
  for (const folder of env.workspaceFolders) {
    for (const venv of [".venv", "venv"]) {
      if (env.platform === "win32") {
        out.push(path.join(folder, venv, "Scripts", "syntaxlock.exe"));
      } else {
        out.push(path.join(folder, venv, "bin", "syntaxlock"));
      }
    }
  }
  return out;
}

export function resolveServerCommand(
  settings: ClientSettings,
  env: Environment,
): ServerCommand | ServerCommandError {
  if (settings.serverPath) {
    const exe = locate(settings.serverPath, env);
    if (!exe) {
      return {
        ok: false,
        message: `syntaxlock.server.path is "${settings.serverPath}", which is not an executable file.`,
        fix:
          "Set syntaxlock.server.path to the `syntaxlock` program of the environment where syntaxlock " +
          "is installed (for example /path/to/.venv/bin/syntaxlock), or clear it to let the extension look for it.",
      };
    }
    return { ok: true, command: exe, args: serveArgs(settings), origin: "syntaxlock.server.path" };
  }
  if (settings.pythonPath) {
    const python = locate(settings.pythonPath, env);
    if (!python) {
      return {
        ok: false,
        message: `syntaxlock.server.pythonPath is "${settings.pythonPath}", which is not an executable file.`,
        fix: "Set syntaxlock.server.pythonPath to a Python interpreter (for example /path/to/.venv/bin/python), or clear it.",
      };
    }
    const problem = env.probePython(python);
    if (problem !== null) {
      return {
        ok: false,
        message: `The Python interpreter ${python} cannot run the syntaxlock server: ${problem}`,
        fix: `Install syntaxlock into that interpreter (\`${python} -m pip install syntaxlock\`), or point syntaxlock.server.pythonPath at one that has it.`,
      };
    }
    return {
      ok: true,
      command: python,
      args: ["-m", "lsp_server.cli", ...serveArgs(settings)],
      origin: "syntaxlock.server.pythonPath",
    };
  }
  const onPath = which("syntaxlock", env);
  if (onPath) {
    return { ok: true, command: onPath, args: serveArgs(settings), origin: "PATH" };
  }
  for (const candidate of venvCandidates(env)) {
    if (env.isExecutableFile(candidate)) {
      return { ok: true, command: candidate, args: serveArgs(settings), origin: "the workspace's virtual environment" };
    }
  }
  return {
    ok: false,
    message: "The syntaxlock language server was not found: there is no `syntaxlock` program on PATH nor in the workspace's .venv.",
    fix:
      `${INSTALL_HINT}, then set syntaxlock.server.path to its \`syntaxlock\` program ` +
      "(or syntaxlock.server.pythonPath to its Python interpreter) and run \"syntaxlock: Restart Server\". " +
      REMOTE_HINT,
  };
}

/** The real environment of this process. */
export function nodeEnvironment(workspaceFolders: readonly string[]): Environment {
  return {
    platform: process.platform,
    pathVariable: process.env.PATH ?? "",
    home: os.homedir(),
    workspaceFolders,
    isExecutableFile(file) {
      try {
        fs.accessSync(file, fs.constants.X_OK);
        return fs.statSync(file).isFile();
      } catch {
        return false;
      }
    },
    probePython(python) {
      const r = spawnSync(python, ["-c", "import lsp_server.cli"], { encoding: "utf8", timeout: 60_000 });
      if (r.error) {
        return r.error.message;
      }
      if (r.status === 0) {
        return null;
      }
      const lines = (r.stderr ?? "").trim().split("\n");
      return lines[lines.length - 1] || `exit status ${String(r.status)}`;
    },
  };
}
