--- syntaxlock: Python completions from a local language model that always parse.
---
---   require("syntaxlock").setup({ settings = { max_tokens = 48 } })
---
--- setup() starts `syntaxlock serve --stdio` (vim.lsp.start) for Python buffers. Suggestions show
--- as ghost text: Neovim's vim.lsp.inline_completion on 0.12+, syntaxlock.ghost on 0.10/0.11.
--- <Tab> accepts (and does what it did before when there is nothing to accept); <Esc>, moving the
--- cursor or typing dismisses. Commands: :SyntaxlockToggle, :SyntaxlockStatus; health:
--- :checkhealth syntaxlock. Statusline: require("syntaxlock").statusline().
local config = require("syntaxlock.config")
local cursor = require("syntaxlock.cursor")
local ghost = require("syntaxlock.ghost")
local keys = require("syntaxlock.keys")
local status = require("syntaxlock.status")
local util = require("syntaxlock.util")

local api = vim.api

local M = {}

---@type syntaxlock.Config|nil
M.config = nil

local warned = {}

local function warn_once(key, msg)
  if warned[key] then
    return
  end
  warned[key] = true
  vim.notify("syntaxlock: " .. msg, vim.log.levels.WARN)
end

--- Whether suggestions come from Neovim's own inline completion (0.12+).
function M.native()
  local mod = util.native_inline_completion()
  if mod == nil then
    return false
  end
  return M.config == nil or M.config.native ~= false
end

local function capabilities()
  local caps = vim.lsp.protocol.make_client_capabilities()
  caps.textDocument = caps.textDocument or {}
  caps.textDocument.inlineCompletion = caps.textDocument.inlineCompletion or { dynamicRegistration = false }
  caps.window = caps.window or {}
  caps.window.workDoneProgress = true
  return caps
end

local function on_exit(code, signal, client_id)
  vim.schedule(function()
    -- other syntaxlock clients (other projects) may still run
    for _, c in ipairs(util.clients()) do
      if c.id ~= client_id and not util.call(c, "is_stopped") then
        return
      end
    end
    if code ~= 0 and signal ~= 15 then
      local msg = ("the server exited with code %d; its messages are in :LspLog"):format(code)
      status.set({ state = "error", message = msg, percentage = nil })
      warn_once("exit:" .. client_id, msg)
    else
      status.set({ state = "stopped", message = "the server stopped", percentage = nil })
    end
  end)
end

--- Starts (or reuses) the server for `bufnr`. Returns the client id, or nil when the server
--- can't be found (then the status says why, once, as a warning).
---@param bufnr integer|nil
---@return integer|nil
function M.start(bufnr)
  bufnr = bufnr or api.nvim_get_current_buf()
  local cfg = M.config
  if cfg == nil then
    return nil
  end
  local cmd, problem = config.server_cmd(cfg)
  if cmd == nil then
    status.set({ state = "missing", message = problem, percentage = nil })
    warn_once("missing", problem .. " See :checkhealth syntaxlock.")
    return nil
  end
  local name = api.nvim_buf_get_name(bufnr)
  local root = (name ~= "" and vim.fs.root(bufnr, cfg.server.root_markers)) or vim.fn.getcwd()
  if status.current.state == "stopped" or status.current.state == "missing" then
    status.set({ state = "starting", message = "starting " .. cmd[1], percentage = nil })
  end
  return vim.lsp.start({
    name = "syntaxlock",
    cmd = cmd,
    root_dir = root,
    init_options = config.server_settings(cfg),
    capabilities = capabilities(),
    handlers = { ["syntaxlock/status"] = status.handler },
    on_exit = on_exit,
  }, { bufnr = bufnr })
end

--- Wires a buffer the server attached to: ghost text (or Neovim's own), and the keys.
local function on_attach(client, bufnr)
  local cfg = M.config
  if cfg == nil then
    return
  end
  cursor.attach(bufnr, client.id)
  if M.native() then
    local ic = util.native_inline_completion()
    ic.enable(cfg.enabled, { bufnr = bufnr })
    keys.map(bufnr, cfg.keys, function()
      return ic.get({ bufnr = bufnr }) and true or false
    end, function()
      ic.get({ bufnr = bufnr })
    end)
  else
    ghost.attach(bufnr, client.id)
    keys.map(bufnr, cfg.keys, function()
      return ghost.accept(bufnr)
    end, function()
      ghost.request(bufnr, true)
    end)
  end
end

local function send_settings()
  local settings = { syntaxlock = config.server_settings(M.config) }
  for _, c in ipairs(util.clients()) do
    if not util.call(c, "is_stopped") then
      util.call(c, "notify", "workspace/didChangeConfiguration", { settings = settings })
    end
  end
end

--- Turns suggestions on or off (no argument: flips them). The server stays up.
---@param on boolean|nil
function M.toggle(on)
  if M.config == nil then
    vim.notify("syntaxlock: call require('syntaxlock').setup() first", vim.log.levels.WARN)
    return
  end
  if on == nil then
    on = not M.config.enabled
  end
  M.config.enabled = on
  ghost.set_enabled(on)
  local ic = M.native() and util.native_inline_completion() or nil
  if ic then
    for _, c in ipairs(util.clients()) do
      for bufnr in pairs(c.attached_buffers or {}) do
        ic.enable(on, { bufnr = bufnr })
      end
    end
  end
  send_settings()
  vim.notify("syntaxlock: suggestions " .. (on and "on" or "off"), vim.log.levels.INFO)
end

--- The status as one short string for a statusline ("syntaxlock ✓", "syntaxlock 40%", ...).
function M.statusline()
  return status.line()
end

--- The last status: { state, message, percentage }.
function M.status()
  return vim.deepcopy(status.current)
end

--- A synchronous executeCommand to the first running client (nil if none or no answer).
function M.server_command(command, timeout_ms)
  local c = util.clients()[1]
  if c == nil or util.call(c, "is_stopped") then
    return nil
  end
  local resp = util.call(c, "request_sync", "workspace/executeCommand", { command = command, arguments = {} }, timeout_ms or 2000)
  if resp and resp.result ~= nil then
    return resp.result
  end
  return nil
end

--- The lines :SyntaxlockStatus shows.
function M.status_lines()
  local lines = { "syntaxlock: " .. status.describe() }
  if M.config == nil then
    table.insert(lines, "  setup() has not been called")
    return lines
  end
  table.insert(lines, "  suggestions: " .. (M.config.enabled and "on" or "off") .. (M.native() and " (vim.lsp.inline_completion)" or " (ghost text)"))
  local c = util.clients()[1]
  if c == nil then
    local cmd, problem = config.server_cmd(M.config)
    table.insert(lines, "  server: not running; " .. (cmd and ("would run " .. table.concat(cmd, " ")) or problem))
    return lines
  end
  table.insert(lines, ("  server: client %d, %s"):format(c.id, table.concat(c.config.cmd or {}, " ")))
  local s = M.server_command("syntaxlock.status")
  if type(s) == "table" then
    table.insert(lines, ("  model: %s  device: %s  store: %s"):format(tostring(s.model), tostring(s.device), tostring(s.store)))
  end
  local st = M.server_command("syntaxlock.stats")
  if type(st) == "table" then
    table.insert(
      lines,
      ("  suggestions so far: %d shown, %d accepted (%d%%), %d dismissed; mean latency %d ms"):format(
        st.shown or 0,
        st.accepted or 0,
        math.floor((st.acceptRate or 0) * 100 + 0.5),
        st.dismissed or 0,
        math.floor((st.meanLatencyMs or 0) + 0.5)
      )
    )
  end
  return lines
end

local function create_commands()
  api.nvim_create_user_command("SyntaxlockToggle", function(a)
    local arg = a.args
    M.toggle(arg == "on" and true or arg == "off" and false or nil)
  end, {
    nargs = "?",
    complete = function()
      return { "on", "off" }
    end,
    desc = "syntaxlock: turn suggestions on or off",
  })
  api.nvim_create_user_command("SyntaxlockStatus", function()
    vim.notify(table.concat(M.status_lines(), "\n"), vim.log.levels.INFO)
  end, { desc = "syntaxlock: the server's state, model and counts" })
end

--- Configures the plugin and starts the server for Python buffers. Safe to call again: the
--- new options replace the old ones (and go to a running server).
---@param opts table|nil see syntaxlock.config.defaults
function M.setup(opts)
  local cfg, problems = config.build(opts)
  local first = M.config == nil
  M.config = cfg
  if #problems > 0 then
    vim.notify("syntaxlock: " .. table.concat(problems, "; "), vim.log.levels.WARN)
  end
  ghost.configure({ enabled = cfg.enabled, debounce_ms = cfg.ghost.debounce_ms, hl_group = cfg.ghost.hl_group })
  api.nvim_set_hl(0, cfg.ghost.hl_group, { link = "Comment", default = true })
  local group = api.nvim_create_augroup("syntaxlock", { clear = true })
  api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = cfg.server.filetypes,
    callback = function(a)
      M.start(a.buf)
    end,
  })
  api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(a)
      local client = vim.lsp.get_client_by_id(a.data.client_id)
      if client and client.name == "syntaxlock" then
        on_attach(client, a.buf)
      end
    end,
  })
  api.nvim_create_autocmd("LspDetach", {
    group = group,
    callback = function(a)
      local client = vim.lsp.get_client_by_id(a.data.client_id)
      if client and client.name == "syntaxlock" then
        ghost.detach(a.buf)
        cursor.detach(a.buf)
        keys.forget(a.buf)
      end
    end,
  })
  api.nvim_create_autocmd("ColorScheme", {
    group = group,
    callback = function()
      api.nvim_set_hl(0, cfg.ghost.hl_group, { link = "Comment", default = true })
    end,
  })
  create_commands()
  if not first then
    send_settings()
  end
  -- buffers already open
  for _, bufnr in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(cfg.server.filetypes, vim.bo[bufnr].filetype) then
      M.start(bufnr)
    end
  end
end

return M
