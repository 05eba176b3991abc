--- The Neovim plugin's tests: headless Neovim instances (children, driven over RPC as a user
--- would type) with the plugin loaded, against the real `syntaxlock serve` and the tiny model.
---
---   nvim --headless -u NONE -i NONE -l editors/nvim/tests/run.lua [PATTERN]
---
--- Environment: SYNTAXLOCK_SERVER (the `syntaxlock` program), SYNTAXLOCK_TEST_MODEL (a model
--- directory; tests/conftest.py's tiny model), SYNTAXLOCK_PYTHON (CPython, to parse the result),
--- SYNTAXLOCK_CACHE (the mask-store cache). Prints "ok N - name" / "not ok N - name" per test
--- and closes with "N passed, M failed"; exits 1 if any failed.
local uv = vim.uv or vim.loop

local HERE = vim.fs.dirname(vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p"))
local PLUGIN = vim.fs.dirname(HERE)
local ROOT = vim.fs.dirname(vim.fs.dirname(PLUGIN))
local NVIM = vim.v.progpath
local SERVER = os.getenv("SYNTAXLOCK_SERVER") or (ROOT .. "/.venv/bin/syntaxlock")
local PYTHON = os.getenv("SYNTAXLOCK_PYTHON") or (ROOT .. "/.venv/bin/python")
local MODEL = os.getenv("SYNTAXLOCK_TEST_MODEL") or (ROOT .. "/.cache/tests/tiny-model")
local CACHE = os.getenv("SYNTAXLOCK_CACHE") or (ROOT .. "/.cache/tests")
local PATTERN = _G.arg and _G.arg[1] or nil
local READY_MS = 600000 -- the first start builds the mask store

-- ---------------------------------------------------------------- a child Neovim over RPC

local Child = {}
Child.__index = Child

--- A fresh Neovim (--clean: no user config, default filetype detection) with the plugin on
--- 'runtimepath' and vim.notify recorded in _G.notes.
function Child.new(opts)
  opts = opts or {}
  local env = vim.tbl_extend("force", { SYNTAXLOCK_CACHE = CACHE, HOME = os.getenv("HOME") or "/tmp" }, opts.env or {})
  local chan = vim.fn.jobstart({ NVIM, "--embed", "--headless", "--clean", "-n" }, {
    rpc = true,
    env = env,
    cwd = opts.cwd,
  })
  assert(chan > 0, "cannot start " .. NVIM)
  local self = setmetatable({ chan = chan }, Child)
  self:lua(
    [[
    vim.opt.runtimepath:prepend(...)
    vim.o.swapfile = false
    _G.notes = {}
    vim.notify = function(msg, level) table.insert(_G.notes, { msg = msg, level = level or vim.log.levels.INFO }) end
  ]],
    PLUGIN
  )
  return self
end

function Child:lua(code, ...)
  return vim.rpcrequest(self.chan, "nvim_exec_lua", code, { ... })
end

function Child:cmd(command)
  return vim.rpcrequest(self.chan, "nvim_command", command)
end

--- Types `keys` as a user would (they go through mappings, autocommands fire).
function Child:type(keys)
  vim.rpcrequest(self.chan, "nvim_input", keys)
  -- a request returns once the child has handled the input before it
  self:lua("return 1")
end

function Child:mode()
  return vim.rpcrequest(self.chan, "nvim_get_mode").mode
end

function Child:line(n)
  return self:lua("return vim.api.nvim_buf_get_lines(0, ... - 1, ..., false)[1]", n)
end

function Child:stop()
  pcall(vim.rpcnotify, self.chan, "nvim_command", "qa!")
  if vim.fn.jobwait({ self.chan }, 15000)[1] == -1 then
    vim.fn.jobstop(self.chan)
  end
end

--- Polls `fn` until it returns a truthy value; fails after `ms`.
local function wait_for(what, ms, fn)
  local t0 = uv.now()
  while true do
    local v = fn()
    if v then
      return v
    end
    if uv.now() - t0 > ms then
      error(("gave up waiting for %s after %d ms"):format(what, ms), 2)
    end
    vim.wait(20)
  end
end

local function eq(want, got, what)
  if not vim.deep_equal(want, got) then
    error(("%s: expected %s, got %s"):format(what or "value", vim.inspect(want), vim.inspect(got)), 2)
  end
end

local function ok(cond, what)
  if not cond then
    error(what or "assertion failed", 2)
  end
end

local function contains(haystack, needle, what)
  if not tostring(haystack):find(needle, 1, true) then
    error(("%s: %q not in %s"):format(what or "text", needle, vim.inspect(haystack)), 2)
  end
end

local function tmpdir()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, "p")
  return dir
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

--- CPython's verdict on a file: nil if it compiles, else the error.
local function cpython_error(path)
  local r = vim.system({ PYTHON, "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')", path }, { text = true }):wait()
  if r.code == 0 then
    return nil
  end
  return r.stderr
end

-- ---------------------------------------------------------------- the tests

local tests = {}
local function test(name, fn)
  table.insert(tests, { name = name, fn = fn })
end

-- Part 1: no server anywhere (PATH without syntaxlock, no .venv in the directory)
local bare = {}

test("missing server: setup() loads cleanly", function()
  bare.dir = tmpdir()
  bare.child = Child.new({ env = { PATH = "/usr/bin:/bin" }, cwd = bare.dir })
  local c = bare.child
  local r = c:lua("return { pcall(require('syntaxlock').setup, {}) }")
  ok(r[1], "setup() raised: " .. tostring(r[2]))
  write(bare.dir .. "/a.py", "import os\n")
  c:cmd("edit " .. bare.dir .. "/a.py")
  eq("python", c:lua("return vim.bo.filetype"), "filetype")
  eq("missing", c:lua("return require('syntaxlock').status().state"), "status")
  local notes = c:lua("return _G.notes")
  eq(1, #notes, "one warning")
  eq(vim.log.levels.WARN, notes[1].level, "warning level")
  contains(notes[1].msg, "not found")
  contains(notes[1].msg, ":checkhealth syntaxlock")
  eq(0, c:lua("return #vim.lsp.get_clients({ name = 'syntaxlock' })"), "clients")
end)

test("missing server: warned once, no errors while editing", function()
  local c = bare.child
  write(bare.dir .. "/b.py", "x = 1\n")
  c:cmd("edit " .. bare.dir .. "/b.py")
  c:type("Gox = 2<Esc>")
  eq("x = 2", c:line(2), "typed text")
  eq(1, #c:lua("return _G.notes"), "still one warning")
  eq("", c:lua("return vim.v.errmsg"), "v:errmsg")
  local messages = c:lua("return vim.api.nvim_exec2('messages', { output = true }).output")
  ok(not messages:find("E5108") and not messages:find("Error"), "errors in :messages: " .. messages)
end)

test("missing server: a mapped accept key falls back to the key's own action", function()
  local c = bare.child
  c:type("Go<Tab>y<Esc>") -- the key's own action (a Python buffer: spaces to the next stop)
  local native = c:line(3)
  ok(native == "\ty" or native:match("^ +y$"), "Tab did something else: " .. vim.inspect(native))
  -- the accept mapping with nothing to accept
  c:lua("require('syntaxlock.keys').map(0, { accept = '<Tab>', trigger = false }, function() return false end, function() end)")
  eq("syntaxlock: accept the suggestion", c:lua("return vim.fn.maparg('<Tab>', 'i', false, true).desc"), "mapped")
  c:lua("vim.api.nvim_buf_set_lines(0, -1, -1, false, { 'z = 3' })") -- the same context as above
  c:type("Go<Tab>y<Esc>")
  eq(native, c:line(5), "same as without the mapping")
end)

test("missing server: :SyntaxlockStatus and :checkhealth say what to do", function()
  local c = bare.child
  c:lua("_G.notes = {}")
  c:cmd("SyntaxlockStatus")
  local notes = c:lua("return _G.notes")
  eq(1, #notes, "one message")
  contains(notes[1].msg, "missing")
  contains(notes[1].msg, "pip install syntaxlock")
  c:cmd("checkhealth syntaxlock")
  local report = c:lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
  contains(report, "ERROR")
  contains(report, "pip install syntaxlock")
  ok(not report:find("Failed to run healthcheck", 1, true), report)
  c:cmd("bwipeout")
end)

test("missing server: setup() twice is harmless", function()
  local c = bare.child
  local before = c:lua("return #vim.api.nvim_get_autocmds({ group = 'syntaxlock' })")
  c:lua("require('syntaxlock').setup({ keys = { accept = '<C-l>' } })")
  eq(before, c:lua("return #vim.api.nvim_get_autocmds({ group = 'syntaxlock' })"), "autocmds")
  eq(2, c:lua("return vim.fn.exists(':SyntaxlockToggle')"), ":SyntaxlockToggle")
  eq("<C-l>", c:lua("return require('syntaxlock').config.keys.accept"), "new options")
  -- bad options are reported, not raised
  c:lua("_G.notes = {}")
  c:lua("require('syntaxlock').setup({ server = { cmd = 42 }, bogus = true })")
  local notes = c:lua("return _G.notes")
  contains(notes[1].msg, "unknown option bogus")
  contains(notes[1].msg, "server.cmd")
  c:stop()
end)

-- Part 2: the real server with the tiny model
local live = {}

local function ghost_state(c)
  return c:lua([[
    local g = require('syntaxlock.ghost')
    local marks = vim.api.nvim_buf_get_extmarks(0, g.ns, 0, -1, { details = true })
    return { visible = g.visible(0), current = g.current(0), pending = g.pending(0), marks = marks, counts = g.counts }
  ]])
end

--- The process id of the language server the child editor started (its only child process).
local function server_pid(c)
  local pids = c:lua("return vim.api.nvim_get_proc_children(vim.fn.getpid())")
  for _, pid in ipairs(pids) do
    local proc = c:lua("return vim.api.nvim_get_proc(...)", pid)
    if proc and proc.name and proc.name:find("syntaxlock", 1, true) then
      return pid
    end
  end
  return #pids == 1 and pids[1] or nil
end

local function stats(c)
  return c:lua("return require('syntaxlock').server_command('syntaxlock.stats', 5000)")
end

test("server: starts for a Python buffer and gets ready", function()
  live.dir = tmpdir()
  live.file = live.dir .. "/shapes.py"
  write(live.file, "import math\n\n\ndef area(radius):\n    return\n")
  live.child = Child.new({ cwd = live.dir })
  local c = live.child
  -- a mapping of the accept key made before the plugin's: the fallback when there is nothing to accept
  c:lua("vim.keymap.set('i', '<Tab>', '2)')")
  c:lua(
    [[
    local server, model = ...
    require('syntaxlock').setup({
      server = { cmd = { server, 'serve', '--stdio' } },
      -- the random model's greedy choice runs on to the token limit; sampling with this seed ends lines
      settings = { model = model, device = 'cpu', temperature = 1, seed = 0, max_tokens = 64 },
    })
  ]],
    SERVER,
    MODEL
  )
  c:cmd("edit " .. live.file)
  wait_for("the client to attach", 30000, function()
    return c:lua("return #vim.lsp.get_clients({ name = 'syntaxlock', bufnr = 0 })") == 1
  end)
  local seen = {}
  wait_for("the server to be ready", READY_MS, function()
    local s = c:lua("return require('syntaxlock').status()")
    seen[s.state] = true
    ok(s.state ~= "error", "server error: " .. tostring(s.message))
    return s.state == "ready"
  end)
  ok(seen.starting or seen.loading, "loading was reported before ready: " .. vim.inspect(seen))
  eq("syntaxlock ✓", c:lua("return require('syntaxlock').statusline()"), "statusline")
end)

test("server: cursor moves are reported to the server (syntaxlock/cursor)", function()
  local c = live.child
  c:lua([[
    local client = require('syntaxlock.util').clients()[1]
    _G.cursor_reports = {}
    local orig = client.notify
    client.notify = function(self, method, params)
      if method == 'syntaxlock/cursor' then
        table.insert(_G.cursor_reports, vim.deepcopy(params))
      end
      return orig(self, method, params)
    end
  ]])
  c:type("3G")
  local r = wait_for("a cursor report", 10000, function()
    local reports = c:lua("return _G.cursor_reports")
    return #reports > 0 and reports[#reports]
  end)
  eq(2, r.position.line, "line of the report")
  eq(0, r.position.character, "character of the report")
  ok(vim.endswith(r.textDocument.uri, "/shapes.py"), "the document: " .. vim.inspect(r.textDocument))
  ok(type(r.textDocument.version) == "number", "with its version")
  local n = #c:lua("return _G.cursor_reports")
  c:type("j")
  c:type("k")
  c:type("j") -- a burst: one report, with the last position
  local last = wait_for("a second report", 10000, function()
    local reports = c:lua("return _G.cursor_reports")
    return #reports > n and reports[#reports]
  end)
  vim.wait(400)
  eq(n + 1, #c:lua("return _G.cursor_reports"), "one report for the burst")
  eq(3, last.position.line, "the last position")
  -- the server used it: it prepared the prompt there (its work-ahead counters)
  wait_for("the server's prefill", 60000, function()
    local s = c:lua("return require('syntaxlock').server_command('syntaxlock.status', 5000)")
    return s and s.workAhead and (s.workAhead.prefill_done or 0) >= 1
  end)
end)

test("server: ghost text appears after typing", function()
  local c = live.child
  c:type("5GA ")
  eq("i", c:mode(), "insert mode")
  local g = wait_for("ghost text", 60000, function()
    local g = ghost_state(c)
    return g.visible and g
  end)
  live.first = g.current
  ok(#g.current.text > 0, "a suggestion")
  eq(1, #g.marks, "one extmark")
  local details = g.marks[1][4]
  eq(4, g.marks[1][2], "on the cursor line")
  eq(11, g.marks[1][3], "at the cursor")
  eq("inline", details.virt_text_pos, "inline virtual text")
  eq(g.current.lines[1], details.virt_text[1][1], "the first line is drawn")
  eq("SyntaxlockGhost", details.virt_text[1][2], "highlight")
  eq("    return ", c:line(5), "the buffer is unchanged")
end)

test("server: accepting inserts the suggestion and the file parses", function()
  local c = live.child
  local text = live.first.text
  c:type("<Tab>")
  eq("i", c:mode(), "still in insert mode")
  local want = vim.split("    return " .. text, "\n", { plain = true })
  eq(want, c:lua("return vim.api.nvim_buf_get_lines(0, 4, 4 + ..., false)", #want), "inserted")
  local cur = c:lua("return vim.api.nvim_win_get_cursor(0)")
  eq({ 5 + #want - 1, #want[#want] }, cur, "cursor after the insertion")
  eq(false, ghost_state(c).visible, "ghost text gone")
  c:type("<Esc>")
  c:cmd("write")
  local err = cpython_error(live.file)
  ok(err == nil, ("CPython rejects the accepted completion %q:\n%s"):format(text, tostring(err)))
  local s = wait_for("the acceptance to reach the server", 10000, function()
    local s = stats(c)
    return s and s.accepted == 1 and s
  end)
  eq(1, s.accepted, "accepted")
end)

test("server: typing cancels the request in flight", function()
  local c = live.child
  c:lua([[
    local client = require('syntaxlock.util').clients()[1]
    _G.cancelled = {}
    local orig = client.cancel_request
    client.cancel_request = function(self, id)
      table.insert(_G.cancelled, id)
      return orig(self, id)
    end
  ]])
  local before = stats(c)
  -- A busy server, made so on purpose: paused while the user types, so that the request is still in
  -- flight at the next keystroke however fast the server would have answered (a prefetched answer
  -- comes back within one poll of the wait below).
  local pid = server_pid(c)
  ok(pid ~= nil, "the server is a child process of the editor")
  uv.kill(pid, "sigstop")
  local typed, err = pcall(function()
    c:type("Goy = 1 +")
    wait_for("a request in flight", 30000, function()
      return ghost_state(c).pending
    end)
  end)
  local requests = ghost_state(c).counts.requests
  if typed then
    c:type(" ")
  end
  uv.kill(pid, "sigcont")
  if not typed then
    error(err, 0)
  end
  local cancelled = c:lua("return _G.cancelled")
  ok(#cancelled >= 1, "no $/cancelRequest sent")
  -- the next suggestion is for the text as it is now
  local g = wait_for("the new suggestion", 60000, function()
    local g = ghost_state(c)
    return g.visible and g
  end)
  ok(g.counts.requests > requests, "a new request was made")
  eq(c:lua("return vim.api.nvim_win_get_cursor(0)[2]"), g.marks[1][3], "drawn at the new cursor")
  eq("y = 1 + ", c:line(6), "typed")
  local after = wait_for("the server's counts", 10000, function()
    local s = stats(c)
    return s and (s.cancelled + s.superseded) > (before.cancelled + before.superseded) and s
  end)
  ok(after.cancelled + after.superseded > before.cancelled + before.superseded, "the server saw the cancellation")
end)

test("server: <Esc> dismisses and reports it", function()
  local c = live.child
  local before = stats(c)
  c:type("<Esc>")
  eq("n", c:mode(), "normal mode")
  local g = ghost_state(c)
  eq(false, g.visible, "gone")
  eq(0, #g.marks, "no extmark left")
  wait_for("the dismissal to reach the server", 10000, function()
    return stats(c).dismissed > before.dismissed
  end)
end)

test("server: moving the cursor dismisses", function()
  local c = live.child
  c:type("A")
  c:type("<M-\\>") -- ask without typing
  wait_for("ghost text", 60000, function()
    return ghost_state(c).visible
  end)
  c:type("<Left>")
  eq(false, ghost_state(c).visible, "gone after <Left>")
  c:type("<Esc>")
  -- complete the line, so that the file parses again
  c:lua("vim.api.nvim_buf_set_lines(0, 5, 6, false, { 'y = 1 + 1' })")
end)

test("server: :SyntaxlockToggle turns suggestions off and on", function()
  local c = live.child
  c:cmd("SyntaxlockToggle")
  wait_for("state disabled", 30000, function()
    return c:lua("return require('syntaxlock').status().state") == "disabled"
  end)
  eq("syntaxlock off", c:lua("return require('syntaxlock').statusline()"), "statusline")
  local requests = ghost_state(c).counts.requests
  c:type("Goz = area(")
  vim.wait(300) -- past the debounce: nothing may be asked
  eq(requests, ghost_state(c).counts.requests, "no request while off")
  eq(false, ghost_state(c).visible, "no ghost text while off")
  c:type("<Tab>")
  ok(vim.endswith(c:lua("return vim.api.nvim_get_current_line()"), "z = area(2)"), "the accept key fell back to the previous mapping")
  c:type("<Esc>")
  c:cmd("SyntaxlockToggle")
  wait_for("state ready", READY_MS, function()
    return c:lua("return require('syntaxlock').status().state") == "ready"
  end)
  c:type("A")
  c:type("<M-\\>")
  wait_for("ghost text again", 60000, function()
    return ghost_state(c).visible
  end)
  c:type("<Esc>")
end)

test("server: :SyntaxlockStatus shows the model and the counts", function()
  local c = live.child
  c:lua("_G.notes = {}")
  c:cmd("SyntaxlockStatus")
  local msg = c:lua("return _G.notes[#_G.notes].msg")
  contains(msg, "syntaxlock: ready")
  contains(msg, "tiny-model")
  contains(msg, "suggestions so far:")
end)

test("server: :checkhealth syntaxlock reports the model and store ready", function()
  local c = live.child
  c:cmd("checkhealth syntaxlock")
  local report = c:lua("return table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n')")
  contains(report, "server program: " .. SERVER)
  contains(report, "ready: ")
  contains(report, "model: ")
  contains(report, "tiny-model")
  contains(report, "mask store: ")
  ok(not report:find("ERROR", 1, true), report)
  c:cmd("bwipeout")
end)

test("server: every suggestion was settled once (accepted or dismissed)", function()
  local c = live.child
  wait_for("no request in flight", 60000, function()
    return not ghost_state(c).pending
  end)
  local s = wait_for("the counts to add up", 10000, function()
    local s = stats(c)
    return s and s.shown == s.accepted + s.dismissed and s
  end)
  c:cmd("write")
  local err = cpython_error(live.file)
  ok(err == nil, "the file does not parse:\n" .. tostring(err))
  local counts = ghost_state(c).counts
  eq(counts.accepted, s.accepted, "accepted, client and server")
  eq(counts.dismissed, s.dismissed, "dismissed, client and server")
  ok(s.shown >= 3, "several suggestions: " .. vim.inspect(s))
end)

test("server: setup() again keeps one client", function()
  local c = live.child
  local before = c:lua("return #vim.api.nvim_get_autocmds({ group = 'syntaxlock' })")
  c:lua("require('syntaxlock').setup(...)", {
    server = { cmd = { SERVER, "serve", "--stdio" } },
    settings = { model = MODEL, device = "cpu", temperature = 1, seed = 0, max_tokens = 64 },
  })
  eq(1, c:lua("return #vim.lsp.get_clients({ name = 'syntaxlock' })"), "one client")
  eq(before, c:lua("return #vim.api.nvim_get_autocmds({ group = 'syntaxlock' })"), "autocmds")
  c:stop()
end)

-- ---------------------------------------------------------------- run

local passed, failed = 0, 0
for i, t in ipairs(tests) do
  if PATTERN == nil or t.name:find(PATTERN, 1, true) then
    local t0 = uv.now()
    local okk, err = xpcall(t.fn, debug.traceback)
    if okk then
      passed = passed + 1
      io.stdout:write(("ok %d - %s (%d ms)\n"):format(i, t.name, uv.now() - t0))
    else
      failed = failed + 1
      io.stdout:write(("not ok %d - %s\n"):format(i, t.name))
      for line in tostring(err):gmatch("[^\n]+") do
        io.stdout:write("    " .. line .. "\n")
      end
    end
    io.stdout:flush()
  end
end
for _, part in ipairs({ bare, live }) do
  if part.child then
    pcall(part.child.stop, part.child)
  end
end
io.stdout:write(("%d passed, %d failed\n"):format(passed, failed))
io.stdout:flush()
os.exit(failed == 0 and 0 or 1)
