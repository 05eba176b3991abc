import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { Environment, nodeEnvironment, resolveServerCommand, which } from "../../serverCommand";
import type { ClientSettings } from "../../settings";

function env(executables: string[], opts: Partial<Environment> = {}): Environment {
  const set = new Set(executables);
  return {
    platform: "linux",
    pathVariable: "/usr/local/bin:/usr/bin",
    home: "/home/ada",
    workspaceFolders: ["/work/project"],
    isExecutableFile: (f) => set.has(f),
    probePython: () => null,
    ...opts,
  };
}

const settings = (s: Partial<ClientSettings> = {}): ClientSettings => ({ serverPath: "", pythonPath: "", logLevel: "info", ...s });

describe("resolveServerCommand", () => {
  test("finds syntaxlock on PATH first", () => {
    const r = resolveServerCommand(settings(), env(["/usr/bin/syntaxlock", "/work/project/.venv/bin/syntaxlock"]));
    assert.ok(r.ok);
    assert.equal(r.command, "/usr/bin/syntaxlock");
    assert.deepEqual(r.args, ["serve", "--stdio", "--log-level", "info"]);
    assert.equal(r.origin, "PATH");
  });

  test("then in the workspace's .venv", () => {
    const r = resolveServerCommand(settings({ logLevel: "debug" }), env(["/work/project/.venv/bin/syntaxlock"]));
    assert.ok(r.ok);
    assert.equal(r.command, "/work/project/.venv/bin/syntaxlock");
    assert.deepEqual(r.args, ["serve", "--stdio", "--log-level", "debug"]);
  });

  test("says how to fix it when there is none", () => {
    const r = resolveServerCommand(settings(), env([]));
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.match(r.message, /not found/);
      assert.match(r.fix, /pip install syntaxlock/);
      assert.match(r.fix, /syntaxlock\.server\.path/);
      assert.match(r.fix, /Remote settings/);
    }
  });

  test("a configured path wins, with ~ and ${workspaceFolder} expanded", () => {
    const r = resolveServerCommand(settings({ serverPath: "~/tools/syntaxlock" }), env(["/home/ada/tools/syntaxlock", "/usr/bin/syntaxlock"]));
    assert.ok(r.ok);
    assert.equal(r.command, "/home/ada/tools/syntaxlock");
    const w = resolveServerCommand(settings({ serverPath: "${workspaceFolder}/.venv/bin/syntaxlock" }), env(["/work/project/.venv/bin/syntaxlock"]));
    assert.ok(w.ok);
    assert.equal(w.command, "/work/project/.venv/bin/syntaxlock");
  });

  test("a configured path that is not there is an error naming the setting", () => {
    const r = resolveServerCommand(settings({ serverPath: "/nowhere/syntaxlock" }), env(["/usr/bin/syntaxlock"]));
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.match(r.message, /syntaxlock\.server\.path/);
      assert.match(r.message, /\/nowhere\/syntaxlock/);
    }
  });

  test("a bare configured name is looked up on PATH", () => {
    const r = resolveServerCommand(settings({ serverPath: "syntaxlock-dev" }), env(["/usr/local/bin/syntaxlock-dev"]));
    assert.ok(r.ok);
    assert.equal(r.command, "/usr/local/bin/syntaxlock-dev");
  });

  test("a Python interpreter runs the module", () => {
    const r = resolveServerCommand(settings({ pythonPath: "/opt/py/bin/python" }), env(["/opt/py/bin/python"]));
    assert.ok(r.ok);
    assert.equal(r.command, "/opt/py/bin/python");
    assert.deepEqual(r.args, ["-m", "lsp_server.cli", "serve", "--stdio", "--log-level", "info"]);
  });

  test("a Python interpreter without syntaxlock gets the pip command to fix it", () => {
    const r = resolveServerCommand(
      settings({ pythonPath: "/opt/py/bin/python" }),
      env(["/opt/py/bin/python"], { probePython: () => "ModuleNotFoundError: No module named 'lsp_server'" }),
    );
    assert.equal(r.ok, false);
    if (!r.ok) {
      assert.match(r.message, /No module named 'lsp_server'/);
      assert.match(r.fix, /\/opt\/py\/bin\/python -m pip install syntaxlock/);
    }
  });

  test("Windows: PATH is split at ';' and programs end in .exe", () => {
    const want = path.join("C:\\py\\Scripts", "syntaxlock.exe");
    const e = env([want], { platform: "win32", pathVariable: "C:\\Windows;C:\\py\\Scripts" });
    assert.equal(which("syntaxlock", e), want);
    assert.equal(which("syntaxlock", { ...e, platform: "linux" }), undefined);
  });
});

describe("nodeEnvironment", () => {
  test("checks real files and probes a real interpreter", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "syntaxlock-env-"));
    const exe = path.join(dir, "tool");
    const plain = path.join(dir, "plain");
    fs.writeFileSync(exe, "#!/bin/sh\n", { mode: 0o755 });
    fs.writeFileSync(plain, "", { mode: 0o644 });
    const e = nodeEnvironment([dir]);
    assert.equal(e.isExecutableFile(exe), true);
    assert.equal(e.isExecutableFile(plain), false);
    assert.equal(e.isExecutableFile(dir), false);
    assert.equal(e.isExecutableFile(path.join(dir, "missing")), false);
    // /bin/sh is no Python: the probe says what went wrong instead of passing
    assert.notEqual(e.probePython("/bin/sh"), null);
    assert.match(String(e.probePython(path.join(dir, "missing"))), /ENOENT/);
    fs.rmSync(dir, { recursive: true });
  });
});
