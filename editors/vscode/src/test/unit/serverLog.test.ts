import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { describe, test } from "node:test";
import { Channel, pipeServerStderr, recordStart, SENT_LOGGER, ServerStderr } from "../../serverLog";

/** A channel that keeps what it was given, as `level text`. */
function recordingChannel(): Channel & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m: string) => void lines.push(`info ${m}`),
    warn: (m: string) => void lines.push(`warn ${m}`),
    error: (m: string) => void lines.push(`error ${m}`),
  };
}

const at = "2026-11-24 14:41:36,982";

describe("the server's stderr in the output channel", () => {
  test("a record's first line gives its level and logger; other lines give nothing", () => {
    assert.deepEqual(recordStart(`${at} INFO lsp_server.server.suggester: completed x`), {
      level: "info",
      logger: "lsp_server.server.suggester",
    });
    assert.deepEqual(recordStart(`${at} WARNING ${SENT_LOGGER}: a: b`), { level: "warn", logger: SENT_LOGGER });
    assert.equal(recordStart(`${at} CRITICAL x: y`)?.level, "error");
    assert.equal(recordStart(`${at} DEBUG x: y`)?.level, "info");
    assert.equal(recordStart("Traceback (most recent call last):"), undefined);
    assert.equal(recordStart(`${at} NOTICE x: y`), undefined);
    assert.equal(recordStart(`  ${at} INFO x: y`), undefined);
  });

  test("the lines the server also sent as window/logMessage are left out, with their continuation lines", () => {
    const channel = recordingChannel();
    const sink = new ServerStderr(channel);
    const lines = [
      "a line before any record",
      `${at} INFO lsp_server.server.work_ahead: prefetched`,
      `${at} INFO ${SENT_LOGGER}: syntaxlock disabled: syntaxlock is disabled (setting enabled: false)`,
      "  the rest of that message",
      `${at} WARNING lsp_server.server.server: syntaxlock settings: bad`,
      `${at} ERROR lsp_server.server.protocol: failed`,
      "Traceback (most recent call last):",
      `${at} ERROR ${SENT_LOGGER}: syntaxlock: it failed`,
    ];
    for (const line of lines) {
      sink.line(line);
    }
    assert.deepEqual(channel.lines, [
      "error a line before any record",
      `info ${lines[1]}`,
      `warn ${lines[4]}`,
      `error ${lines[5]}`,
      `error ${lines[6]}`,
    ]);
  });

  test("pipeServerStderr writes the stream's lines, the last one without a newline too", async () => {
    const channel = recordingChannel();
    const input = new PassThrough();
    pipeServerStderr(input, channel);
    const closed = new Promise((resolve) => input.on("end", resolve));
    input.write(`${at} INFO a.b: one\r\n${at} INFO ${SENT_LOGGER}: two\n${at} WARN`);
    input.end("ING c: three");
    await closed;
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(channel.lines, [`info ${at} INFO a.b: one`, `warn ${at} WARNING c: three`]);
  });
});
