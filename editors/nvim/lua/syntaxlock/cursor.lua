--- syntaxlock.cursor: tells the server where the cursor is. The LSP has no such notification, so
--- the plugin sends its own, `syntaxlock/cursor` ({ textDocument = { uri, version }, position }),
--- when the cursor moves (CursorMoved, CursorMovedI), on InsertEnter and when a buffer is
--- entered, after a pause (debounced: one notification for a burst of moves). The server
--- prefills the prompt at that cursor while the user pauses, so that the first suggestion there
--- does not wait for it.
local util = require("syntaxlock.util")

local api = vim.api

local M = {}

M.NOTIFICATION = "syntaxlock/cursor"
M.opts = { debounce_ms = 150 }

local group = api.nvim_create_augroup("syntaxlock.cursor", { clear = true })

---@type table<integer, { client_id: integer, timer: any, last: string|nil }>
local buffers = {}

--- Counters for the tests: notifications sent.
M.counts = { sent = 0 }

function M.configure(opts)
  M.opts = vim.tbl_extend("force", M.opts, opts or {})
end

--- Sends the cursor of the current window now, if it shows `bufnr` (and it moved since the last).
function M.send(bufnr)
  local st = buffers[bufnr]
  if st == nil or api.nvim_get_current_buf() ~= bufnr then
    return
  end
  local client = vim.lsp.get_client_by_id(st.client_id)
  if client == nil or util.call(client, "is_stopped") then
    return
  end
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding or "utf-16")
  params.textDocument.version = vim.lsp.util.buf_versions[bufnr]
  local key = vim.json.encode(params)
  if key == st.last then
    return
  end
  st.last = key
  M.counts.sent = M.counts.sent + 1
  util.call(client, "notify", M.NOTIFICATION, params)
end

local function moved(bufnr)
  local st = buffers[bufnr]
  if st == nil then
    return
  end
  util.debounce(st, M.opts.debounce_ms, function()
    if buffers[bufnr] == st then
      M.send(bufnr)
    end
  end)
end

--- Reports the cursor of `bufnr` to client `client_id` from now on. Idempotent.
function M.attach(bufnr, client_id)
  local _, new = util.buffer_state(buffers, bufnr, client_id)
  if not new then
    return
  end
  util.on_buffer(group, bufnr, { "CursorMoved", "CursorMovedI", "InsertEnter", "BufEnter" }, moved)
  util.on_buffer(group, bufnr, { "BufUnload", "BufWipeout" }, M.detach)
  moved(bufnr)
end

function M.detach(bufnr)
  local st = buffers[bufnr]
  if st == nil then
    return
  end
  if st.timer then
    st.timer:stop()
    st.timer:close()
  end
  buffers[bufnr] = nil
  pcall(api.nvim_clear_autocmds, { group = group, buffer = bufnr })
end

return M
