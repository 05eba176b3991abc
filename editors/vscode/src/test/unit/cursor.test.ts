import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { CursorParams, CursorReporter, Timers } from "../../cursor";

/** Timers that run only when the test says so. */
class ManualTimers implements Timers {
  pending = new Map<number, () => void>();
  private next = 0;
  set(fn: () => void): unknown {
    this.next++;
    this.pending.set(this.next, fn);
    return this.next;
  }
  clear(handle: unknown): void {
    this.pending.delete(handle as number);
  }
  fire(): void {
    const fns = [...this.pending.values()];
    this.pending.clear();
    fns.forEach((f) => f());
  }
}

const doc = (uri: string, languageId = "python", version = 1) => ({ uri: { toString: () => uri }, version, languageId });

describe("cursor reports", () => {
  test("a burst of moves is one report, with the last position, after the pause", () => {
    const sent: CursorParams[] = [];
    const timers = new ManualTimers();
    const r = new CursorReporter((p) => sent.push(p), 150, timers);
    r.moved(doc("file:///a.py"), { line: 1, character: 2 });
    r.moved(doc("file:///a.py", "python", 2), { line: 3, character: 4 });
    assert.equal(sent.length, 0, "nothing before the pause");
    assert.equal(timers.pending.size, 1, "one timer");
    timers.fire();
    assert.deepEqual(sent, [{ textDocument: { uri: "file:///a.py", version: 2 }, position: { line: 3, character: 4 } }]);
  });

  test("other languages are not reported; the same position is reported once", () => {
    const sent: CursorParams[] = [];
    const timers = new ManualTimers();
    const r = new CursorReporter((p) => sent.push(p), 150, timers);
    r.moved(doc("file:///a.txt", "plaintext"), { line: 0, character: 0 });
    timers.fire();
    assert.equal(sent.length, 0);
    r.moved(doc("file:///a.py"), { line: 5, character: 0 });
    timers.fire();
    r.moved(doc("file:///a.py"), { line: 5, character: 0 });
    timers.fire();
    assert.equal(sent.length, 1, "a repeat is not sent");
    r.reset();
    r.moved(doc("file:///a.py"), { line: 5, character: 0 });
    timers.fire();
    assert.equal(sent.length, 2, "after reset (a new server) it is");
  });

  test("dispose drops the pending report", () => {
    const sent: CursorParams[] = [];
    const timers = new ManualTimers();
    const r = new CursorReporter((p) => sent.push(p), 150, timers);
    r.moved(doc("file:///a.py"), { line: 1, character: 0 });
    r.dispose();
    timers.fire();
    r.flush();
    assert.equal(sent.length, 0);
  });
});
