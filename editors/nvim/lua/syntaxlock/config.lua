--- syntaxlock.config: the options of `require("syntaxlock").setup{}`, their defaults and checks,
--- the server's settings as it reads them (camelCase), and the command that starts the server.
local M = {}

--- Server options: snake_case here, camelCase on the wire (the names of `syntaxlock serve`'s
--- initializationOptions, which VS Code's `syntaxlock.*` settings mirror too).
M.SETTING_NAMES = {
  model = "model",
  device = "device",
  store = "store",
  max_tokens = "maxTokens",
  temperature = "temperature",
  top_p = "topP",
  seed = "seed",
  constrained = "constrained",
  mode = "mode",
  speculative = "speculative",
  canonical = "canonical",
  draft_model = "draftModel",
  context_tokens = "contextTokens",
  first_window_tokens = "firstWindowTokens",
  completion_items = "completionItems",
  work_ahead = "workAhead",
  latency_budget_ms = "latencyBudgetMs",
  context_share = "contextShare",
  cache_memory_mb = "cacheMemoryMB",
  python_version = "pythonVersion",
  identifiers = "identifiers",
  team_server = "teamServer",
}

---@class syntaxlock.Config
M.defaults = {
  --- Offer completions (the server's `enabled`); :SyntaxlockToggle flips it.
  enabled = true,
  server = {
    --- The command that starts the server, e.g. { "/path/.venv/bin/syntaxlock", "serve", "--stdio" }.
    --- nil: `syntaxlock` on PATH, then .venv/bin/syntaxlock in the current directory.
    cmd = nil,
    --- A Python interpreter that has syntaxlock: runs `python -m lsp_server.cli serve --stdio`.
    python = nil,
    log_level = "info", -- debug | info | warning | error
    log_file = nil, -- the server logs to this file too (its stderr goes to Neovim's LSP log)
    filetypes = { "python" },
    root_markers = { "pyproject.toml", "setup.py", "setup.cfg", ".git" },
  },
  --- The server's options (nil: the server's default). Bad values are refused by the server,
  --- which says so (vim.notify) and keeps the previous value.
  settings = {
    model = nil, -- "default", a Hugging Face model directory, or a .gguf file
    device = nil, -- auto | cpu | cuda
    store = nil, -- mask-store file; nil: the per-user cache, built on first use
    max_tokens = nil, -- 64
    temperature = nil, -- 0: greedy
    top_p = nil, -- 1
    seed = nil,
    constrained = nil, -- true
    mode = nil, -- auto | single | multi
    speculative = nil, -- true
    canonical = nil, -- true: only token sequences the model's tokenizer itself would produce
    draft_model = nil, -- a small model with the same tokenizer, as a draft source for speculation
    context_tokens = nil, -- 1024
    first_window_tokens = nil, -- 256
    completion_items = nil, -- true: also one item in the completion menu
    work_ahead = nil, -- true: prefill at the cursor when you pause, prefetch after an accept
    latency_budget_ms = nil, -- 250: a longer answer shows its complete lines so far; 0: none
    context_share = nil, -- nil: the model's (0.25 for one with repository markers, Qwen2.5-Coder; 0 for others); 0: off; 0.25: a quarter of context_tokens for the repository's definitions and similar code
    cache_memory_mb = nil, -- 96: memory for the files' prepared prompts (KV caches)
    python_version = nil, -- "3.8".."3.14": the syntax completions may use; nil: the project's
    -- requires-python lower bound or .python-version, else 3.14
    identifiers = nil, -- "constrain": names that exist (off | bias | constrain)
    team_server = nil, -- "http://gpu-box:8000": ask a team server (syntaxlock team-serve) for the
    -- model's part; nil: the model runs in the local server
  },
  keys = {
    --- Accepts the ghost text; without one, the key does what it did before (its previous
    --- mapping, or its own action). false: no mapping.
    accept = "<Tab>",
    --- Asks for a suggestion now. false: no mapping.
    trigger = "<M-\\>",
  },
  ghost = {
    --- Wait this long after the last keystroke before asking (Neovim 0.10/0.11 ghost text).
    debounce_ms = 60,
    hl_group = "SyntaxlockGhost", -- linked to Comment unless defined
  },
  --- Use Neovim's own vim.lsp.inline_completion (0.12+). nil: when it exists.
  native = nil,
}

local function is_list_of_strings(v)
  if type(v) ~= "table" or not vim.islist(v) then
    return false
  end
  for _, s in ipairs(v) do
    if type(s) ~= "string" then
      return false
    end
  end
  return true
end

local LOG_LEVELS = { debug = true, info = true, warning = true, error = true }

--- The option names setup() knows (nil-valued defaults vanish from M.defaults, hence this list).
local KNOWN = {
  enabled = true,
  native = true,
  server = { cmd = true, python = true, log_level = true, log_file = true, filetypes = true, root_markers = true },
  settings = M.SETTING_NAMES,
  keys = { accept = true, trigger = true },
  ghost = { debounce_ms = true, hl_group = true },
}

--- Problems with `opts` that make it unusable (wrong types, unknown keys), as messages.
---@param opts table
---@return string[]
function M.problems(opts)
  local out = {}
  for k, v in pairs(opts) do
    local known = KNOWN[k]
    if known == nil then
      table.insert(out, ("unknown option %s"):format(tostring(k)))
    elseif type(known) == "table" and type(v) == "table" then
      for sub in pairs(v) do
        if not known[sub] then
          table.insert(out, ("unknown option %s.%s"):format(k, tostring(sub)))
        end
      end
    end
  end
  local checks = {
    { "enabled", opts.enabled, "boolean" },
    { "server", opts.server, "table" },
    { "settings", opts.settings, "table" },
    { "keys", opts.keys, "table" },
    { "ghost", opts.ghost, "table" },
    { "native", opts.native, "boolean" },
  }
  for _, c in ipairs(checks) do
    if c[2] ~= nil and type(c[2]) ~= c[3] then
      table.insert(out, ("%s must be a %s, not %s"):format(c[1], c[3], type(c[2])))
    end
  end
  local server = type(opts.server) == "table" and opts.server or {}
  if server.cmd ~= nil and type(server.cmd) ~= "string" and not is_list_of_strings(server.cmd) then
    table.insert(out, "server.cmd must be a list of strings (or one string)")
  end
  if server.python ~= nil and type(server.python) ~= "string" then
    table.insert(out, "server.python must be a string")
  end
  if server.log_level ~= nil and not LOG_LEVELS[server.log_level] then
    table.insert(out, "server.log_level must be one of debug, info, warning, error")
  end
  if server.filetypes ~= nil and not is_list_of_strings(server.filetypes) then
    table.insert(out, "server.filetypes must be a list of strings")
  end
  local keys = type(opts.keys) == "table" and opts.keys or {}
  for _, k in ipairs({ "accept", "trigger" }) do
    if keys[k] ~= nil and keys[k] ~= false and type(keys[k]) ~= "string" then
      table.insert(out, ("keys.%s must be a key (string) or false"):format(k))
    end
  end
  local ghost = type(opts.ghost) == "table" and opts.ghost or {}
  if ghost.debounce_ms ~= nil and (type(ghost.debounce_ms) ~= "number" or ghost.debounce_ms < 0) then
    table.insert(out, "ghost.debounce_ms must be a number >= 0")
  end
  return out
end

--- The defaults with `opts` applied; the problems found. A bad value is reported and replaced by
--- its default, so that a typo never stops the plugin from loading.
---@param opts table|nil
---@return syntaxlock.Config, string[]
function M.build(opts)
  if opts == nil then
    opts = {}
  end
  if type(opts) ~= "table" then
    return vim.deepcopy(M.defaults), { "setup() takes a table of options" }
  end
  local problems = M.problems(opts)
  local clean = {}
  for k, v in pairs(opts) do
    local d = M.defaults[k]
    if (d ~= nil and type(d) == type(v)) or (k == "native" and type(v) == "boolean") then
      clean[k] = v
    end
  end
  local cfg = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), clean)
  local s, d = cfg.server, M.defaults.server
  if type(s.cmd) == "string" then
    s.cmd = { s.cmd }
  elseif s.cmd ~= nil and not is_list_of_strings(s.cmd) then
    s.cmd = nil
  end
  if s.python ~= nil and type(s.python) ~= "string" then
    s.python = nil
  end
  if not LOG_LEVELS[s.log_level] then
    s.log_level = d.log_level
  end
  if not is_list_of_strings(s.filetypes) then
    s.filetypes = vim.deepcopy(d.filetypes)
  end
  for _, k in ipairs({ "accept", "trigger" }) do
    if cfg.keys[k] ~= false and type(cfg.keys[k]) ~= "string" then
      cfg.keys[k] = M.defaults.keys[k]
    end
  end
  if type(cfg.ghost.debounce_ms) ~= "number" or cfg.ghost.debounce_ms < 0 then
    cfg.ghost.debounce_ms = M.defaults.ghost.debounce_ms
  end
  for k in pairs(cfg.settings) do
    if not M.SETTING_NAMES[k] then
      cfg.settings[k] = nil
    end
  end
  return cfg, problems
end

--- The server's settings as it reads them: camelCase keys, unset options left out.
---@param cfg syntaxlock.Config
---@return table
function M.server_settings(cfg)
  local out = { enabled = cfg.enabled }
  for snake, camel in pairs(M.SETTING_NAMES) do
    local v = cfg.settings[snake]
    if v ~= nil then
      out[camel] = v
    end
  end
  return out
end

--- The command that starts the server, or nil and a message that says how to fix it.
---@param cfg syntaxlock.Config
---@param cwd string|nil
---@return string[]|nil cmd
---@return string|nil problem
function M.server_cmd(cfg, cwd)
  local s = cfg.server
  local tail = { "serve", "--stdio", "--log-level", s.log_level or "info" }
  if s.log_file then
    vim.list_extend(tail, { "--log-file", s.log_file })
  end
  if s.cmd then
    local exe = vim.fn.exepath(vim.fn.expand(s.cmd[1]))
    if exe == "" then
      return nil,
        ("server.cmd[1] = %q is not an executable program. Point it at the `syntaxlock` program of the environment where syntaxlock is installed (e.g. /path/to/.venv/bin/syntaxlock)."):format(
          s.cmd[1]
        )
    end
    local cmd = vim.deepcopy(s.cmd)
    cmd[1] = exe
    return cmd
  end
  if s.python then
    local py = vim.fn.exepath(vim.fn.expand(s.python))
    if py == "" then
      return nil, ("server.python = %q is not an executable program."):format(s.python)
    end
    return vim.list_extend({ py, "-m", "lsp_server.cli" }, tail)
  end
  local exe = vim.fn.exepath("syntaxlock")
  if exe == "" then
    local venv = vim.fs.joinpath(cwd or vim.fn.getcwd(), ".venv", "bin", "syntaxlock")
    if vim.fn.executable(venv) == 1 then
      exe = venv
    end
  end
  if exe == "" then
    return nil,
      "the `syntaxlock` program was not found (not on PATH, no .venv/bin/syntaxlock here). Install syntaxlock "
        .. "(`pip install syntaxlock`, or `make setup` in a syntaxlock checkout), then put its `syntaxlock` on PATH "
        .. 'or pass setup{ server = { cmd = { "/path/to/.venv/bin/syntaxlock", "serve", "--stdio" } } }.'
  end
  return vim.list_extend({ exe }, tail)
end

return M
