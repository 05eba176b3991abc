--- syntaxlock.util: small helpers that hide the differences between Neovim 0.10, 0.11 and 0.12.
local M = {}

local HAS_011 = vim.fn.has("nvim-0.11") == 1

--- Calls a method of an LSP client: `client:name(...)` on 0.11+, `client.name(...)` on 0.10.
function M.call(client, name, ...)
  if HAS_011 then
    return client[name](client, ...)
  end
  return client[name](...)
end

--- The clients of this plugin (optionally those attached to `bufnr`).
---@param bufnr integer|nil
function M.clients(bufnr)
  local get = vim.lsp.get_clients or vim.lsp.get_active_clients
  return get({ name = "syntaxlock", bufnr = bufnr })
end

--- Asks the server to run one of its commands; `handler(err, result)` gets the answer.
function M.execute(client, command, arguments, handler, bufnr)
  if client == nil or M.call(client, "is_stopped") then
    return false
  end
  return M.call(client, "request", "workspace/executeCommand", {
    command = command,
    arguments = arguments or {},
  }, function(err, result)
    if handler then
      handler(err, result)
    end
  end, bufnr)
end

--- The byte column of an LSP position's character (in the client's encoding) on line `row`.
---@param bufnr integer
---@param row integer 0-based
---@param character integer
---@param encoding string "utf-8"|"utf-16"|"utf-32"
---@return integer
function M.byte_col(bufnr, row, character, encoding)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  if encoding == "utf-8" then
    return math.min(character, #line)
  end
  local ok, col
  if HAS_011 then
    ok, col = pcall(vim.str_byteindex, line, encoding, character, false)
  else
    ok, col = pcall(vim.str_byteindex, line, character, encoding == "utf-16")
  end
  if ok and col then
    return math.min(col, #line)
  end
  return #line
end

--- The state of `bufnr` in `buffers` (served by client `client_id`), made when missing; true
--- when it was made now.
function M.buffer_state(buffers, bufnr, client_id)
  local st = buffers[bufnr]
  if st then
    st.client_id = client_id
    return st, false
  end
  st = { client_id = client_id }
  buffers[bufnr] = st
  return st, true
end

--- Runs `fn(bufnr)` on `events` in buffer `bufnr` (autocommands of `group`).
function M.on_buffer(group, bufnr, events, fn)
  vim.api.nvim_create_autocmd(events, {
    group = group,
    buffer = bufnr,
    callback = function()
      fn(bufnr)
    end,
  })
end

--- Runs `fn` (scheduled) `ms` after the last call for `owner`, which keeps the timer in `owner.timer`.
function M.debounce(owner, ms, fn)
  owner.timer = owner.timer or (vim.uv or vim.loop).new_timer()
  owner.timer:stop()
  owner.timer:start(ms, 0, vim.schedule_wrap(fn))
end

--- Neovim's own inline completion (0.12+), or nil.
function M.native_inline_completion()
  local ok, mod = pcall(function()
    return vim.lsp.inline_completion
  end)
  if ok and type(mod) == "table" and type(mod.enable) == "function" then
    return mod
  end
  return nil
end

return M
