import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseServerStatus, statusView } from "../../status";

describe("parseServerStatus", () => {
  test("reads a well-formed notification", () => {
    assert.deepEqual(parseServerStatus({ state: "loading", message: "building the mask store", percentage: 41.6 }), {
      state: "loading",
      message: "building the mask store",
      percentage: 42,
    });
  });
  test("clamps the percentage and turns a missing one into null", () => {
    assert.equal(parseServerStatus({ state: "loading", message: "", percentage: 140 })?.percentage, 100);
    assert.equal(parseServerStatus({ state: "ready", message: "" })?.percentage, null);
    assert.equal(parseServerStatus({ state: "ready" })?.message, "");
  });
  test("rejects unknown states and non-objects", () => {
    assert.equal(parseServerStatus({ state: "sleeping", message: "" }), undefined);
    assert.equal(parseServerStatus(null), undefined);
    assert.equal(parseServerStatus("ready"), undefined);
  });
});

describe("statusView", () => {
  test("loading shows a spinner and the percentage", () => {
    const v = statusView({ kind: "running", server: { state: "loading", message: "loading the model", percentage: 30 } });
    assert.equal(v.text, "$(sync~spin) syntaxlock 30%");
    assert.match(v.tooltip, /loading the model/);
    assert.equal(v.background, undefined);
  });
  test("loading without a percentage shows none", () => {
    assert.equal(statusView({ kind: "running", server: { state: "loading", message: "", percentage: null } }).text, "$(sync~spin) syntaxlock");
  });
  test("ready shows a check, a click turns completions off", () => {
    const v = statusView({ kind: "running", server: { state: "ready", message: "SmolLM2 on cpu", percentage: null } });
    assert.equal(v.text, "$(check) syntaxlock");
    assert.equal(v.command, "syntaxlock.toggle");
    assert.match(v.tooltip, /SmolLM2 on cpu/);
  });
  test("disabled shows off, a click turns completions on", () => {
    const v = statusView({ kind: "running", server: { state: "disabled", message: "", percentage: null } });
    assert.equal(v.text, "$(circle-slash) syntaxlock off");
    assert.equal(v.command, "syntaxlock.toggle");
  });
  test("errors are red and lead to the log", () => {
    const server = statusView({ kind: "running", server: { state: "error", message: "no such model", percentage: null } });
    assert.equal(server.background, "statusBarItem.errorBackground");
    assert.equal(server.command, "syntaxlock.showLog");
    assert.match(server.tooltip, /no such model/);
    const failed = statusView({ kind: "stopped", error: "spawn ENOENT" });
    assert.equal(failed.background, "statusBarItem.errorBackground");
    assert.match(failed.tooltip, /spawn ENOENT/);
  });
  test("a stopped server is started by a click", () => {
    assert.equal(statusView({ kind: "stopped" }).command, "syntaxlock.restart");
  });
  test("starting and waiting spin", () => {
    assert.match(statusView({ kind: "starting" }).text, /sync~spin/);
    assert.match(statusView({ kind: "running" }).text, /sync~spin/);
  });
});
