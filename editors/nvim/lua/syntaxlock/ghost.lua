--- syntaxlock.ghost: inline completions as ghost text, for Neovim 0.10 and 0.11 (0.12 has
--- vim.lsp.inline_completion).
---
--- Each keystroke in insert mode cancels the request in flight and clears the ghost text; after a
--- short pause the plugin asks `textDocument/inlineCompletion` again. The answer is shown only
--- if the buffer and the cursor are still where they were when it was asked: the first line as
--- inline virtual text at the cursor, the other lines as virtual lines below. Accepting inserts
--- the text over the item's range (which may cover auto-closed brackets after the cursor) and
--- runs the item's command (`syntaxlock.accepted`); leaving insert mode, moving the cursor or
--- typing dismisses it (`syntaxlock.dismissed`). Every item the server sends is settled once,
--- accepted or dismissed, so that the server's counts add up.
local util = require("syntaxlock.util")

local api = vim.api

local M = {}

M.ns = api.nvim_create_namespace("syntaxlock.ghost")
local group = api.nvim_create_augroup("syntaxlock.ghost", { clear = true })

local ACCEPTED = "syntaxlock.accepted"
local DISMISSED = "syntaxlock.dismissed"
local AUTOMATIC, INVOKED = 2, 1 -- InlineCompletionTriggerKind

M.opts = { enabled = true, debounce_ms = 60, hl_group = "SyntaxlockGhost" }

---@class syntaxlock.Request
---@field id integer|nil
---@field tick integer
---@field row integer 0-based
---@field col integer byte column

---@class syntaxlock.Shown
---@field id any the server's id of the suggestion
---@field command table|nil
---@field text string the whole insertText
---@field srow integer
---@field scol integer
---@field erow integer
---@field ecol integer
---@field row integer cursor when shown
---@field col integer
---@field tick integer
---@field extmark integer
---@field lines string[] what is drawn

---@class syntaxlock.BufState
---@field client_id integer
---@field request syntaxlock.Request|nil
---@field shown syntaxlock.Shown|nil
---@field timer any

---@type table<integer, syntaxlock.BufState>
local buffers = {}

--- Counters for :SyntaxlockStatus and the tests: requests sent, cancelled, shown, accepted, dismissed.
M.counts = { requests = 0, cancelled = 0, shown = 0, accepted = 0, dismissed = 0 }

function M.configure(opts)
  M.opts = vim.tbl_extend("force", M.opts, opts or {})
end

--- A buffer number, 0 and nil meaning the current buffer.
local function resolve(bufnr)
  if bufnr == nil or bufnr == 0 then
    return api.nvim_get_current_buf()
  end
  return bufnr
end

local function client_of(st)
  local c = vim.lsp.get_client_by_id(st.client_id)
  if c == nil or util.call(c, "is_stopped") then
    return nil
  end
  return c
end

local function item_id(item)
  local cmd = type(item) == "table" and item.command or nil
  if type(cmd) == "table" and cmd.command == ACCEPTED and type(cmd.arguments) == "table" then
    return cmd.arguments[1]
  end
  return nil
end

--- Ids reported already. The server answers a request identical to an earlier one (same
--- document version and position) with the same suggestion and id; it is reported once.
local settled, settled_count = {}, 0

--- Marks `id` reported; false if it was already.
local function settle(id)
  if id == nil or settled[id] then
    return false
  end
  if settled_count >= 4096 then
    settled, settled_count = {}, 0
  end
  settled[id] = true
  settled_count = settled_count + 1
  return true
end

--- Tells the server an item went unused.
local function dismissed(st, bufnr, id)
  if not settle(id) then
    return
  end
  M.counts.dismissed = M.counts.dismissed + 1
  util.execute(client_of(st), DISMISSED, { id }, nil, bufnr)
end

local function in_insert_mode()
  return api.nvim_get_mode().mode:sub(1, 1) == "i"
end

--- Stops the request in flight and the pending timer.
local function cancel(st)
  if st.timer then
    st.timer:stop()
  end
  local req = st.request
  st.request = nil
  if req and req.id then
    local c = client_of(st)
    if c then
      M.counts.cancelled = M.counts.cancelled + 1
      util.call(c, "cancel_request", req.id)
    end
  end
end

--- Removes the ghost text; `accepted` says the user took it (else it was dismissed).
local function clear(st, bufnr, accepted)
  local s = st.shown
  if not s then
    return
  end
  st.shown = nil
  pcall(api.nvim_buf_del_extmark, bufnr, M.ns, s.extmark)
  if not accepted then
    dismissed(st, bufnr, s.id)
  end
end

local function expand_tabs(s)
  if not s:find("\t", 1, true) then
    return s
  end
  return (s:gsub("\t", string.rep(" ", vim.bo.tabstop)))
end

--- Draws `item` at the cursor where `req` was made. False if it can't be shown there.
local function show(st, bufnr, item, req)
  local client = client_of(st)
  if not client then
    return false
  end
  local text = item.insertText
  if type(text) == "table" then -- a snippet: shown and inserted as its text
    text = text.value
  end
  if type(text) ~= "string" then
    return false
  end
  local enc = client.offset_encoding or "utf-16"
  local srow, scol, erow, ecol = req.row, req.col, req.row, req.col
  if type(item.range) == "table" then
    srow, erow = item.range.start.line, item.range["end"].line
    scol = util.byte_col(bufnr, srow, item.range.start.character, enc)
    ecol = util.byte_col(bufnr, erow, item.range["end"].character, enc)
  end
  -- a range on the cursor's line that holds the cursor
  if srow ~= req.row or erow ~= req.row or scol > req.col or ecol < req.col then
    return false
  end
  local line = api.nvim_buf_get_lines(bufnr, req.row, req.row + 1, false)[1] or ""
  local typed = line:sub(scol + 1, req.col) -- already in the buffer, before the cursor
  if text:sub(1, #typed) ~= typed then
    return false
  end
  local lines = vim.split(text:sub(#typed + 1), "\n", { plain = true })
  -- brackets after the cursor that the text brings again: drawn by the buffer itself
  local covered = line:sub(req.col + 1, ecol)
  if #lines == 1 and covered ~= "" and vim.endswith(lines[1], covered) then
    lines[1] = lines[1]:sub(1, #lines[1] - #covered)
  end
  if #lines == 1 and lines[1] == "" then
    return false
  end
  local hl = M.opts.hl_group
  local mark = { hl_mode = "combine" }
  if lines[1] ~= "" then
    mark.virt_text = { { lines[1], hl } }
    mark.virt_text_pos = "inline"
  end
  if #lines > 1 then
    mark.virt_lines = {}
    for i = 2, #lines do
      table.insert(mark.virt_lines, { { expand_tabs(lines[i]), hl } })
    end
  end
  local ok, extmark = pcall(api.nvim_buf_set_extmark, bufnr, M.ns, req.row, req.col, mark)
  if not ok then
    return false
  end
  st.shown = {
    id = item_id(item),
    command = item.command,
    text = text,
    srow = srow,
    scol = scol,
    erow = erow,
    ecol = ecol,
    row = req.row,
    col = req.col,
    tick = req.tick,
    extmark = extmark,
    lines = lines,
  }
  M.counts.shown = M.counts.shown + 1
  return true
end

local function on_result(bufnr, req, err, result)
  local st = buffers[bufnr]
  if not st then
    return
  end
  local items = {}
  if type(result) == "table" then
    items = result.items or result
  end
  if st.request ~= req then -- cancelled, or another request replaced it
    for _, item in ipairs(items) do
      dismissed(st, bufnr, item_id(item))
    end
    return
  end
  st.request = nil
  if err then
    vim.lsp.log.warn("syntaxlock: textDocument/inlineCompletion", err)
    return
  end
  local still_here = M.opts.enabled
    and in_insert_mode()
    and api.nvim_get_current_buf() == bufnr
    and api.nvim_buf_get_changedtick(bufnr) == req.tick
  if still_here then
    local cur = api.nvim_win_get_cursor(0)
    still_here = cur[1] - 1 == req.row and cur[2] == req.col
  end
  for i, item in ipairs(items) do
    -- one suggestion is shown; any other is settled at once
    if not (i == 1 and still_here and not st.shown and show(st, bufnr, item, req)) then
      dismissed(st, bufnr, item_id(item))
    end
  end
end

--- Asks for a suggestion at the cursor (if the buffer is attached and in insert mode).
---@param bufnr integer
---@param invoked boolean|nil asked by the user (trigger key), not by typing
function M.request(bufnr, invoked)
  bufnr = resolve(bufnr)
  local st = buffers[bufnr]
  if not st or not M.opts.enabled or api.nvim_get_current_buf() ~= bufnr or not in_insert_mode() then
    return
  end
  local client = client_of(st)
  if not client then
    return
  end
  cancel(st)
  clear(st, bufnr, false)
  local win = api.nvim_get_current_win()
  local cur = api.nvim_win_get_cursor(win)
  local params = vim.lsp.util.make_position_params(win, client.offset_encoding or "utf-16")
  params.context = { triggerKind = invoked and INVOKED or AUTOMATIC }
  ---@type syntaxlock.Request
  local req = { tick = api.nvim_buf_get_changedtick(bufnr), row = cur[1] - 1, col = cur[2] }
  st.request = req
  local ok, id = util.call(client, "request", "textDocument/inlineCompletion", params, function(err, result)
    on_result(bufnr, req, err, result)
  end, bufnr)
  if ok and id then
    req.id = id
    M.counts.requests = M.counts.requests + 1
  elseif st.request == req then
    st.request = nil
  end
end

--- After a keystroke: cancel, clear, and ask again after a pause.
local function on_change(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  cancel(st)
  clear(st, bufnr, false)
  if not M.opts.enabled then
    return
  end
  util.debounce(st, M.opts.debounce_ms, function()
    if buffers[bufnr] == st then
      M.request(bufnr, false)
    end
  end)
end

local function on_cursor(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  local cur = api.nvim_win_get_cursor(0)
  local row, col = cur[1] - 1, cur[2]
  if st.shown and (st.shown.row ~= row or st.shown.col ~= col) then
    clear(st, bufnr, false)
  end
  local req = st.request
  if req and (req.row ~= row or req.col ~= col) then
    cancel(st)
  end
end

local function on_leave(bufnr)
  local st = buffers[bufnr]
  if st then
    cancel(st)
    clear(st, bufnr, false)
  end
end

--- Whether ghost text is on screen in `bufnr`.
function M.visible(bufnr)
  local st = buffers[resolve(bufnr)]
  return st ~= nil and st.shown ~= nil
end

--- What is on screen: { id, text, lines } or nil (for statuslines and tests).
function M.current(bufnr)
  local st = buffers[resolve(bufnr)]
  local s = st and st.shown
  if not s then
    return nil
  end
  return { id = s.id, text = s.text, lines = vim.deepcopy(s.lines) }
end

--- Whether a request is in flight in `bufnr`.
function M.pending(bufnr)
  local st = buffers[resolve(bufnr)]
  return st ~= nil and st.request ~= nil and st.request.id ~= nil
end

--- Inserts the ghost text. False if there is none (or the buffer changed under it).
---@param bufnr integer|nil
---@return boolean
function M.accept(bufnr)
  bufnr = resolve(bufnr)
  local st = buffers[bufnr]
  local s = st and st.shown
  if not s then
    return false
  end
  if api.nvim_buf_get_changedtick(bufnr) ~= s.tick then
    clear(st, bufnr, false)
    return false
  end
  clear(st, bufnr, true)
  cancel(st)
  local new = vim.split(s.text, "\n", { plain = true })
  api.nvim_buf_set_text(bufnr, s.srow, s.scol, s.erow, s.ecol, new)
  local row = s.srow + #new - 1
  local col = (#new == 1 and s.scol or 0) + #new[#new]
  pcall(api.nvim_win_set_cursor, 0, { row + 1, col })
  M.counts.accepted = M.counts.accepted + 1
  local cmd = s.command
  if type(cmd) == "table" and type(cmd.command) == "string" and (s.id == nil or settle(s.id)) then
    util.execute(client_of(st), cmd.command, cmd.arguments, nil, bufnr)
  end
  return true
end

--- Clears the ghost text of `bufnr` (reported as dismissed).
function M.dismiss(bufnr)
  on_leave(resolve(bufnr))
end

--- Turns requests on or off everywhere; off clears what is shown.
function M.set_enabled(on)
  M.opts.enabled = on
  if not on then
    for bufnr in pairs(buffers) do
      on_leave(bufnr)
    end
  end
end

--- Starts ghost text in `bufnr`, served by client `client_id`. Idempotent.
function M.attach(bufnr, client_id)
  local _, new = util.buffer_state(buffers, bufnr, client_id)
  if not new then
    return
  end
  util.on_buffer(group, bufnr, { "TextChangedI", "TextChangedP" }, on_change)
  util.on_buffer(group, bufnr, "CursorMovedI", on_cursor)
  util.on_buffer(group, bufnr, { "InsertLeave", "BufLeave" }, on_leave)
  util.on_buffer(group, bufnr, { "BufUnload", "BufWipeout" }, M.detach)
end

--- Stops ghost text in `bufnr`.
function M.detach(bufnr)
  local st = buffers[bufnr]
  if not st then
    return
  end
  cancel(st)
  clear(st, bufnr, false)
  if st.timer then
    st.timer:close()
  end
  buffers[bufnr] = nil
  pcall(api.nvim_clear_autocmds, { group = group, buffer = bufnr })
end

function M.attached(bufnr)
  return buffers[resolve(bufnr)] ~= nil
end

return M
