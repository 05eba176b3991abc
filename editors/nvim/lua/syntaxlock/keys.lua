--- syntaxlock.keys: the insert-mode accept key, which falls back to what the key did before (the
--- mapping it had, or the key's own action) when there is nothing to accept.
local api = vim.api

local M = {}

local DESC_ACCEPT = "syntaxlock: accept the suggestion"
local DESC_TRIGGER = "syntaxlock: ask for a suggestion"

--- "bufnr:key" -> the mapping the key had before ours (false: none)
local saved = {}

local function feed(keys, remap)
  -- "i": before what is already typed ahead (the key came first); "t": as if typed
  api.nvim_feedkeys(keys, (remap and "m" or "n") .. "it", false)
end

--- What `key` did in insert mode in `bufnr` before we mapped it: a maparg() dict or nil.
local function previous_mapping(bufnr, key)
  local m = api.nvim_buf_call(bufnr, function()
    return vim.fn.maparg(key, "i", false, true)
  end)
  if type(m) ~= "table" or vim.tbl_isempty(m) or m.desc == DESC_ACCEPT then
    return nil
  end
  return m
end

--- Does what `key` would have done without us.
function M.fallback(key, prev)
  if prev == nil then
    feed(vim.keycode(key), false)
    return
  end
  local remap = prev.noremap ~= 1
  if prev.callback then
    local out = prev.callback()
    if prev.expr == 1 and type(out) == "string" and out ~= "" then
      if prev.replace_keycodes == 1 then
        out = vim.keycode(out)
      end
      feed(out, remap)
    end
  elseif type(prev.rhs) == "string" and prev.rhs ~= "" then
    local rhs = prev.rhs
    if prev.expr == 1 then
      rhs = vim.fn.eval(rhs)
    end
    feed(api.nvim_replace_termcodes(rhs, true, true, true), remap)
  else
    feed(vim.keycode(key), false)
  end
end

--- Forgets what was saved for `bufnr` (the buffer is gone).
function M.forget(bufnr)
  for slot in pairs(saved) do
    if vim.startswith(slot, bufnr .. ":") then
      saved[slot] = nil
    end
  end
end

--- Maps `keys.accept` and `keys.trigger` in insert mode in `bufnr`.
---@param bufnr integer
---@param keys { accept: string|false, trigger: string|false }
---@param accept fun(): boolean inserts the suggestion; false if there was none
---@param trigger fun()
function M.map(bufnr, keys, accept, trigger)
  if keys.accept then
    -- remembered per buffer, so that mapping again (setup() twice) keeps the true previous one
    local slot = ("%d:%s"):format(bufnr, keys.accept)
    if saved[slot] == nil then
      saved[slot] = previous_mapping(bufnr, keys.accept) or false
    end
    local prev = saved[slot] or nil
    vim.keymap.set("i", keys.accept, function()
      if not accept() then
        M.fallback(keys.accept, prev)
      end
    end, { buffer = bufnr, desc = DESC_ACCEPT, silent = true })
  end
  if keys.trigger then
    vim.keymap.set("i", keys.trigger, trigger, { buffer = bufnr, desc = DESC_TRIGGER, silent = true })
  end
end

return M
