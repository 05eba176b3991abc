--- :checkhealth syntaxlock — Neovim version, the server program, and (when it runs) its model
--- and mask store.
local M = {}

local health = vim.health

function M.check()
  health.start("syntaxlock: Neovim")
  local v = vim.version()
  local version = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.10") == 0 then
    health.error(("Neovim %s is too old: syntaxlock needs 0.10 or later (inline virtual text)"):format(version))
    return
  end
  local ok_mod, sl = pcall(require, "syntaxlock")
  if not ok_mod then
    health.error("require('syntaxlock') failed: " .. tostring(sl))
    return
  end
  if sl.config == nil then
    health.warn("setup() has not been called", { "add require('syntaxlock').setup() to your config" })
    return
  end
  if sl.native() then
    health.ok(("Neovim %s: suggestions through vim.lsp.inline_completion"):format(version))
  else
    health.ok(("Neovim %s: suggestions as syntaxlock's own ghost text"):format(version))
  end

  health.start("syntaxlock: server")
  local config = require("syntaxlock.config")
  local cmd, problem = config.server_cmd(sl.config)
  if cmd == nil then
    health.error("the server can't be started: " .. problem, {
      "pip install syntaxlock (or `make setup` in a syntaxlock checkout, which makes .venv/)",
      'then setup{ server = { cmd = { "/path/to/.venv/bin/syntaxlock", "serve", "--stdio" } } }, or put syntaxlock on PATH',
    })
    return
  end
  local probe = vim.system({ cmd[1], "--help" }, { text = true }):wait(30000)
  if cmd[#cmd] ~= "--stdio" and not vim.tbl_contains(cmd, "--stdio") then
    health.warn("the server command has no --stdio: " .. table.concat(cmd, " "))
  end
  if probe.code == 0 then
    health.ok("server program: " .. table.concat(cmd, " "))
  else
    health.error(("`%s --help` failed (exit %s): %s"):format(cmd[1], tostring(probe.code), vim.trim(probe.stderr or "")), {
      "reinstall syntaxlock in that environment, or point server.cmd at a working one",
    })
    return
  end

  local util = require("syntaxlock.util")
  local client = util.clients()[1]
  if client == nil then
    health.info("not running: it starts with the first Python buffer")
    return
  end
  health.ok(("running: client %d, root %s"):format(client.id, tostring(client.config.root_dir)))
  local st = sl.status()
  local described = require("syntaxlock.status").describe()
  if st.state == "ready" then
    health.ok(described)
  elseif st.state == "loading" or st.state == "starting" then
    health.warn("still " .. described, {
      "the first start builds the mask store (10-20 s); run :checkhealth syntaxlock again in a moment",
    })
  elseif st.state == "disabled" then
    health.info("suggestions are off (:SyntaxlockToggle turns them on)")
  else
    health.error(described, { "see :LspLog for the server's messages" })
  end
  local s = sl.server_command("syntaxlock.status")
  if type(s) ~= "table" then
    health.warn("the server did not answer syntaxlock.status")
    return
  end
  if s.state == "ready" then
    health.ok(("model: %s on %s"):format(tostring(s.model), tostring(s.device)))
    health.ok(("mask store: %s"):format(tostring(s.store)))
  else
    health.info(("model: %s, store: %s (state %s)"):format(tostring(s.model), tostring(s.store), tostring(s.state)))
  end
end

return M
