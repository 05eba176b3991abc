import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CompletionTracker, itemId, resultIds } from "../../telemetry";

const item = (id: unknown, command = "syntaxlock.accepted") => ({
  insertText: "x",
  command: { title: "syntaxlock accepted", command, arguments: [id] },
});

describe("item ids", () => {
  test("come from the syntaxlock.accepted command", () => {
    assert.equal(itemId(item("c-1")), "c-1");
    assert.equal(itemId(item(12)), 12);
    assert.equal(itemId(item("c-1", "other.command")), undefined);
    assert.equal(itemId({}), undefined);
    assert.equal(itemId(item({ nested: true })), undefined);
  });
  test("results may be arrays, lists or nothing", () => {
    assert.deepEqual(resultIds([item(1), item(2), { insertText: "y" }]), [1, 2]);
    assert.deepEqual(resultIds({ items: [item("a")] }), ["a"]);
    assert.deepEqual(resultIds(null), []);
    assert.deepEqual(resultIds(undefined), []);
  });
});

describe("CompletionTracker", () => {
  test("shown and not accepted means dismissed", () => {
    const t = new CompletionTracker();
    t.shown([1, 2]);
    assert.equal(t.accepted(1), true);
    assert.deepEqual(t.dismissAll(), [2]);
    assert.deepEqual(t.dismissAll(), []);
  });
  test("an id is settled once", () => {
    const t = new CompletionTracker();
    t.shown(["a"]);
    t.shown(["a"]);
    assert.equal(t.pendingCount, 1);
    assert.equal(t.accepted("a"), true);
    assert.equal(t.accepted("a"), false);
    assert.deepEqual(t.dismissAll(), []);
  });
  test("an id served again after it was settled is not reported again", () => {
    const t = new CompletionTracker();
    t.shown(["s-1"]);
    assert.deepEqual(t.dismissAll(), ["s-1"]);
    t.shown(["s-1"]); // the server's answer to the same request, same id
    assert.deepEqual(t.dismissAll(), []);
    t.shown(["s-2"]);
    assert.equal(t.accepted("s-2"), true);
    t.shown(["s-2"]);
    assert.equal(t.accepted("s-2"), false);
  });
  test("unknown or malformed ids are ignored", () => {
    const t = new CompletionTracker();
    assert.equal(t.accepted("nope"), false);
    assert.equal(t.accepted(undefined), false);
    assert.equal(t.accepted({}), false);
  });
});
