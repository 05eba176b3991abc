import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";
import {
  classifyChange,
  clientSettings,
  SERVER_DEFAULTS,
  SERVER_OPTION_KEYS,
  serverOptions,
} from "../../settings";

const pkg = JSON.parse(fs.readFileSync(path.resolve(__dirname, "..", "..", "..", "package.json"), "utf8")) as {
  activationEvents: string[];
  contributes: {
    configuration: { properties: Record<string, { default?: unknown; enum?: unknown[]; type: unknown }> };
    commands: { command: string }[];
    keybindings: { command: string; key: string; when: string }[];
  };
};
const props = pkg.contributes.configuration.properties;

describe("package.json settings", () => {
  test("mirror every server option under syntaxlock.*, with the server's defaults", () => {
    for (const key of SERVER_OPTION_KEYS) {
      const spec = props[`syntaxlock.${key}`];
      assert.ok(spec, `syntaxlock.${key} is missing from contributes.configuration`);
      assert.deepEqual(spec.default, SERVER_DEFAULTS[key], `default of syntaxlock.${key}`);
    }
  });

  test("hold nothing but server options and the client's own settings", () => {
    const client = new Set(["syntaxlock.server.path", "syntaxlock.server.pythonPath", "syntaxlock.server.logLevel", "syntaxlock.trace.server"]);
    for (const key of Object.keys(props)) {
      const name = key.replace(/^syntaxlock\./, "");
      assert.ok(
        client.has(key) || (SERVER_OPTION_KEYS as readonly string[]).includes(name),
        `${key} is neither a server option nor a client setting`,
      );
    }
  });

  test("enums match the server's accepted values", () => {
    assert.deepEqual(props["syntaxlock.mode"]!.enum, ["auto", "single", "multi"]);
    assert.deepEqual(props["syntaxlock.device"]!.enum, ["auto", "cpu", "cuda"]);
  });

  test("activate on Python only, and bind Escape to the dismissal command", () => {
    assert.deepEqual(pkg.activationEvents, ["onLanguage:python"]);
    const esc = pkg.contributes.keybindings.find((k) => k.key === "escape");
    assert.equal(esc?.command, "syntaxlock.dismiss");
    assert.match(esc!.when, /inlineSuggestionVisible/);
    const declared = pkg.contributes.commands.map((c) => c.command).sort();
    assert.deepEqual(declared, ["syntaxlock.dismiss", "syntaxlock.restart", "syntaxlock.showLog", "syntaxlock.showStats", "syntaxlock.toggle"]);
  });
});

describe("serverOptions", () => {
  test("unset settings take the server's defaults", () => {
    assert.deepEqual(serverOptions(() => undefined), { ...SERVER_DEFAULTS });
  });

  test("passes the user's values through unchanged, even bad ones (the server judges them)", () => {
    const values: Record<string, unknown> = { maxTokens: 0, mode: "multi", seed: 7, temperature: 0.2, store: "/tmp/s.safetensors" };
    const out = serverOptions((k) => values[k]);
    assert.equal(out.maxTokens, 0);
    assert.equal(out.mode, "multi");
    assert.equal(out.seed, 7);
    assert.equal(out.temperature, 0.2);
    assert.equal(out.store, "/tmp/s.safetensors");
    assert.equal(out.enabled, true);
  });

  test("empty strings mean null for store and seed, and the default model", () => {
    const values: Record<string, unknown> = { store: "", seed: "", model: "" };
    const out = serverOptions((k) => values[k]);
    assert.equal(out.store, null);
    assert.equal(out.seed, null);
    assert.equal(out.model, "default");
  });

  test("sends exactly the server's keys, never the client's", () => {
    const out = serverOptions((k) => (k.startsWith("server.") ? "x" : undefined));
    assert.deepEqual(Object.keys(out), [...SERVER_OPTION_KEYS]);
  });
});

describe("clientSettings", () => {
  test("trims paths and falls back to the info log level", () => {
    const values: Record<string, unknown> = { "server.path": "  /opt/bin/syntaxlock ", "server.logLevel": "LOUD" };
    assert.deepEqual(clientSettings((k) => values[k]), { serverPath: "/opt/bin/syntaxlock", pythonPath: "", logLevel: "info" });
  });

  test("accepts a known log level in any case", () => {
    assert.equal(clientSettings((k) => (k === "server.logLevel" ? "DEBUG" : undefined)).logLevel, "debug");
  });
});

describe("classifyChange", () => {
  test("server.* settings need a restart", () => {
    assert.equal(classifyChange((k) => k === "server" || k === "server.path"), "restart");
  });
  test("server options are sent to the running server", () => {
    assert.equal(classifyChange((k) => k === "maxTokens"), "server-options");
    assert.equal(classifyChange((k) => k === "enabled"), "server-options");
  });
  test("other settings change nothing", () => {
    assert.equal(classifyChange(() => false), "none");
  });
});
