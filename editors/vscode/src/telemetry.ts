/**
 * Acceptance and dismissal of inline completions, reported to the server.
 *
 * Every item the server sends carries the command `syntaxlock.accepted [id]`, which VS Code runs
 * when the user accepts the item. An item that was shown and not accepted was dismissed: the user
 * pressed Escape (our keybinding), or typed or moved on so that VS Code asked for new items. The
 * tracker turns those events into the ids to report with `syntaxlock.dismissed [id]`.
 */

export const ACCEPTED_COMMAND = "syntaxlock.accepted";
export const DISMISSED_COMMAND = "syntaxlock.dismissed";

export type ItemId = string | number;

interface CommandLike {
  command: string;
  arguments?: unknown[];
}

interface ItemLike {
  command?: CommandLike;
}

function isId(value: unknown): value is ItemId {
  return typeof value === "string" || (typeof value === "number" && Number.isFinite(value));
}

/** The id an item carries in its `syntaxlock.accepted` command, if any. */
export function itemId(item: ItemLike): ItemId | undefined {
  const cmd = item.command;
  if (cmd === undefined || cmd.command !== ACCEPTED_COMMAND || !Array.isArray(cmd.arguments)) {
    return undefined;
  }
  const id = cmd.arguments[0];
  return isId(id) ? id : undefined;
}

/** The ids of a provider result: an array of items, a list `{items}`, or nothing. */
export function resultIds(result: unknown): ItemId[] {
  let items: unknown;
  if (Array.isArray(result)) {
    items = result;
  } else if (typeof result === "object" && result !== null && Array.isArray((result as { items?: unknown }).items)) {
    items = (result as { items: unknown[] }).items;
  } else {
    return [];
  }
  const out: ItemId[] = [];
  for (const item of items as unknown[]) {
    if (typeof item === "object" && item !== null) {
      const id = itemId(item as ItemLike);
      if (id !== undefined) {
        out.push(id);
      }
    }
  }
  return out;
}

/** How many settled ids the tracker remembers. */
const SETTLED_LIMIT = 4096;

export class CompletionTracker {
  /** Items shown to the user and not yet accepted or dismissed, in the order they came. */
  private readonly pending: ItemId[] = [];
  /**
   * Ids already reported. The server answers a request identical to an earlier one (same
   * document version and position) with the same suggestion and id: it is reported only once.
   */
  private readonly settled = new Set<ItemId>();

  private settle(id: ItemId): void {
    this.settled.add(id);
    if (this.settled.size > SETTLED_LIMIT) {
      const oldest = this.settled.values().next().value;
      if (oldest !== undefined) {
        this.settled.delete(oldest);
      }
    }
  }

  /** The items of a new result are on screen. */
  shown(ids: readonly ItemId[]): void {
    for (const id of ids) {
      if (!this.pending.includes(id) && !this.settled.has(id)) {
        this.pending.push(id);
      }
    }
  }

  /**
   * The user accepted `id`: true if it was pending (the others shown with it are dismissed
   * when the next request comes). False for an unknown or already settled id.
   */
  accepted(id: unknown): boolean {
    if (!isId(id)) {
      return false;
    }
    const i = this.pending.indexOf(id);
    if (i < 0) {
      return false;
    }
    this.pending.splice(i, 1);
    this.settle(id);
    return true;
  }

  /**
   * Everything pending is gone from the screen (Escape, or a new request replaces it): the
   * ids to report as dismissed. Settles them.
   */
  dismissAll(): ItemId[] {
    const gone = this.pending.splice(0, this.pending.length);
    for (const id of gone) {
      this.settle(id);
    }
    return gone;
  }

  get pendingCount(): number {
    return this.pending.length;
  }
}
