--- syntaxlock.status: what the server last said about itself (`syntaxlock/status`
--- notifications), and the client's own states: not found, not started, exited.
local M = {}

---@class syntaxlock.Status
---@field state "loading"|"ready"|"error"|"disabled"|"missing"|"stopped"|"starting"
---@field message string
---@field percentage integer|nil

---@type syntaxlock.Status
M.current = { state = "stopped", message = "not started (open a Python file)", percentage = nil }

local SERVER_STATES = { loading = true, ready = true, error = true, disabled = true }

--- Sets the state and tells whoever listens (User SyntaxlockStatus autocmd, for statuslines).
---@param state syntaxlock.Status
function M.set(state)
  M.current = state
  vim.schedule(function()
    vim.api.nvim_exec_autocmds("User", { pattern = "SyntaxlockStatus", modeline = false, data = state })
  end)
end

--- The `syntaxlock/status` handler. Malformed notifications are logged and ignored.
function M.handler(_, result, ctx)
  if type(result) ~= "table" or not SERVER_STATES[result.state] then
    vim.lsp.log.warn("syntaxlock: malformed syntaxlock/status", result)
    return
  end
  local pct = result.percentage
  M.set({
    state = result.state,
    message = type(result.message) == "string" and result.message or "",
    percentage = type(pct) == "number" and math.floor(pct + 0.5) or nil,
    client_id = ctx and ctx.client_id,
  })
end

--- One short line for a statusline: "syntaxlock 40%", "syntaxlock ✓", "syntaxlock off", ...
---@return string
function M.line()
  local s = M.current
  if s.state == "loading" then
    return s.percentage and ("syntaxlock %d%%"):format(s.percentage) or "syntaxlock …"
  elseif s.state == "ready" then
    return "syntaxlock ✓"
  elseif s.state == "disabled" then
    return "syntaxlock off"
  elseif s.state == "starting" then
    return "syntaxlock …"
  elseif s.state == "stopped" then
    return ""
  end
  return "syntaxlock ✗" -- error, missing
end

--- A sentence: "ready: model tiny-model on cpu".
---@return string
function M.describe()
  local s = M.current
  local pct = (s.state == "loading" and s.percentage) and (" (%d%%)"):format(s.percentage) or ""
  if s.message ~= "" then
    -- the server's messages often name the state already ("ready: model ... on cpu")
    if vim.startswith(s.message, s.state) then
      return s.message .. pct
    end
    return ("%s: %s%s"):format(s.state, s.message, pct)
  end
  return s.state .. pct
end

return M
