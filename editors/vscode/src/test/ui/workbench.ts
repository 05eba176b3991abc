/**
 * VS Code's workbench in headless Chromium, seen and driven as a person would: keys typed, the
 * status bar, the ghost text and the notifications read from the page. The in-page code is
 * JavaScript text (the extension's TypeScript build has no DOM types).
 */
import * as fs from "node:fs";
import { BrowserContext, chromium, Page } from "playwright-core";

/**
 * Flags for Debian's Chromium in a sandboxed, offline, GPU-less machine: without the network
 * ones it waits on background requests that never answer.
 */
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export interface StatusItem {
  /** The codicon: `check`, `sync`, `circle-slash`, `error`. */
  icon: string;
  text: string;
  /** The item's accessible label: its text and its tooltip. */
  label: string;
}

/** The syntaxlock status-bar item as a JS expression (its id is `<extension id>.syntaxlock.status`). */
const STATUS_ITEM_JS = `(() => {
  const el = document.querySelector('.statusbar-item[id$="syntaxlock.status"]');
  if (!el) return null;
  const icon = el.querySelector('.codicon');
  const name = icon ? [...icon.classList].find((c) => c.startsWith('codicon-') && c !== 'codicon-modifier-spin') : undefined;
  return { icon: name ? name.slice('codicon-'.length) : '', text: el.textContent.trim(), label: el.getAttribute('aria-label') || '' };
})()`;

/**
 * The ghost text of the active editor as a JS expression: the part on the cursor's line (inline
 * decorations) and the lines below it (a view zone), joined with newlines; null when none.
 */
const GHOST_TEXT_JS = `(() => {
  const editor = document.querySelector('.editor-instance .monaco-editor');
  if (!editor) return null;
  const inline = [...editor.querySelectorAll('.view-lines .ghost-text-decoration')].map((e) => e.textContent).join('');
  const below = [...editor.querySelectorAll('.view-zones .suggest-preview-text .view-line')].map((e) => e.textContent);
  if (inline === '' && below.length === 0) return null;
  return [inline, ...below].join('\\n').replace(/\\u00a0/g, ' ');
})()`;

export class Workbench {
  private constructor(
    readonly context: BrowserContext,
    readonly page: Page,
  ) {}

  /** Chromium with a fresh profile, on `url` once VS Code's workbench is there. */
  static async open(chromiumPath: string, profileDir: string, url: string, timeoutMs: number): Promise<Workbench> {
    fs.mkdirSync(profileDir, { recursive: true });
    const context = await chromium.launchPersistentContext(profileDir, {
      executablePath: chromiumPath,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 960, height: 480 },
    });
    const page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(timeoutMs);
    await page.goto(url, { timeout: timeoutMs });
    await page.waitForSelector(".monaco-workbench .part.statusbar", { timeout: timeoutMs });
    return new Workbench(context, page);
  }

  async close(): Promise<void> {
    await this.context.close();
  }

  /** Opens a file of the workspace through Quick Open (Ctrl+P), as a person would. */
  async openFile(name: string): Promise<void> {
    await this.page.keyboard.press("Control+P");
    await this.page.waitForSelector(".quick-input-widget .quick-input-box input");
    await this.page.keyboard.type(name);
    await this.page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${name}"]`);
    await this.page.keyboard.press("Enter");
    await this.page.waitForSelector(`.tabs-container .tab.active[aria-label*="${name}"]`);
    await this.page.waitForSelector(".editor-instance .monaco-editor.focused");
  }

  /** Runs a command by its title from the Command Palette (Ctrl+Shift+P). */
  async runCommand(title: string): Promise<void> {
    await this.page.keyboard.press("Control+Shift+P");
    await this.page.waitForSelector(".quick-input-widget .quick-input-box input");
    await this.page.keyboard.type(title);
    await this.page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${title}"]`);
    await this.page.keyboard.press("Enter");
    await this.page.waitForSelector(".quick-input-widget", { state: "hidden" });
  }

  async type(text: string): Promise<void> {
    await this.page.keyboard.type(text, { delay: 20 });
  }

  async press(key: string): Promise<void> {
    await this.page.keyboard.press(key);
  }

  async statusItem(): Promise<StatusItem | null> {
    return (await this.page.evaluate(STATUS_ITEM_JS)) as StatusItem | null;
  }

  /**
   * Starts noting every change of the status item in the page (every 25 ms), so that a state
   * shown for a moment is not missed; `statusHistory` reads the notes.
   */
  async recordStatus(): Promise<void> {
    await this.page.evaluate(`(() => {
      window.__syntaxlockStatus = [];
      setInterval(() => {
        const s = ${STATUS_ITEM_JS};
        const all = window.__syntaxlockStatus;
        const last = all[all.length - 1];
        if (s && (!last || last.label !== s.label || last.icon !== s.icon)) all.push(s);
      }, 25);
    })()`);
  }

  async statusHistory(): Promise<StatusItem[]> {
    return (await this.page.evaluate("window.__syntaxlockStatus || []")) as StatusItem[];
  }

  /**
   * Waits until the status item shows `icon` with `text` in its label; fails at once if it shows
   * an error instead.
   */
  async waitForStatus(icon: string, text: string, timeoutMs: number): Promise<StatusItem> {
    const handle = await this.page.waitForFunction(
      `(() => {
        const s = ${STATUS_ITEM_JS};
        return s && ((s.icon === ${JSON.stringify(icon)} && s.label.includes(${JSON.stringify(text)})) || s.icon === 'error') ? s : null;
      })()`,
      undefined,
      { timeout: timeoutMs, polling: 50 },
    );
    const status = (await handle.jsonValue()) as StatusItem;
    if (status.icon !== icon) {
      throw new Error(`the status-bar item shows an error: ${status.label}`);
    }
    return status;
  }

  async ghostText(): Promise<string | null> {
    return (await this.page.evaluate(GHOST_TEXT_JS)) as string | null;
  }

  /** Waits for ghost text to show and to stay the same for `settleMs` (it is drawn in steps). */
  async waitForGhostText(timeoutMs: number, settleMs = 300): Promise<string> {
    await this.page.waitForFunction(`${GHOST_TEXT_JS} !== null`, undefined, { timeout: timeoutMs, polling: 50 });
    let text = await this.ghostText();
    for (;;) {
      await this.page.waitForTimeout(settleMs);
      const again = await this.ghostText();
      if (again === text && again !== null) {
        return again;
      }
      text = again;
    }
  }

  async waitForNoGhostText(timeoutMs: number): Promise<void> {
    await this.page.waitForFunction(`${GHOST_TEXT_JS} === null`, undefined, { timeout: timeoutMs, polling: 50 });
  }

  /**
   * Resolves once the page has drawn two frames after this call. VS Code draws some of what a
   * key changes at the next animation frame, not at the key: the status bar's `Ln, Col` among
   * them (its editor-status part schedules its render with `scheduleAtNextAnimationFrame`).
   */
  async rendered(): Promise<void> {
    await this.page.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(null))))");
  }

  /**
   * The cursor, 0-based, from the status bar's `Ln 5, Col 12` (the test's files have no tabs),
   * once the status bar has drawn the keys pressed so far: read at once after typing, it can
   * still show the column before the last key.
   */
  async cursor(): Promise<{ line: number; character: number }> {
    await this.rendered();
    const text = (await this.page.locator('[id="status.editor.selection"]').textContent()) ?? "";
    const m = /Ln (\d+), Col (\d+)/.exec(text);
    if (!m) {
      throw new Error(`no cursor position in the status bar: ${JSON.stringify(text)}`);
    }
    return { line: Number(m[1]) - 1, character: Number(m[2]) - 1 };
  }

  /** The texts of the notification toasts on screen. */
  async notifications(): Promise<string[]> {
    return this.page.locator(".notifications-toasts .notification-list-item-message").allTextContents();
  }

  async screenshot(file: string): Promise<void> {
    await this.page.screenshot({ path: file });
  }
}
