-- completer.nvim: ghost-text completions from completer-lsp (textDocument/inlineCompletion, LSP 3.18).
--
--   require("completer").setup({
--     cmd = { "completer-lsp", "--stdio" },
--     init_options = { engine = { model = "default", draft = "default", speculation = "auto",
--                                 num_speculative_tokens = "adaptive" }, maxTokens = 32, debounceMs = 0 },
--     filetypes = { "python", "lua", ... },   -- nil: every buffer with a filetype
--     keys = { accept = "<Tab>", accept_line = "<C-l>", dismiss = "<C-]>" },
--   })
--
-- Ghost text is an extmark: the first line inline at the cursor (virt_text_pos = "inline"), the rest as
-- virt_lines below. Every keystroke in insert mode clears it and cancels the request in flight
-- ($/cancelRequest); the server also drops stale requests when it sees the edit. Needs Neovim >= 0.10.
local M = {}

local ns = vim.api.nvim_create_namespace("completer")
local group = vim.api.nvim_create_augroup("completer", { clear = true })

local defaults = {
  cmd = { "completer-lsp", "--stdio" },
  init_options = { maxTokens = 32, debounceMs = 0 },
  filetypes = nil,
  root_markers = { ".git", "pyproject.toml", "package.json" },
  keys = { accept = "<Tab>", accept_line = "<C-l>", dismiss = "<C-]>" },
  hl_group = "CompleterGhost",
  auto_trigger = true,
}

M.config = vim.deepcopy(defaults)
-- What the plugin is doing, for the statusline, :CompleterStatus and tests.
M.state = { ghost = nil, pending = nil, last_latency_ms = nil, requests = 0, cancelled = 0, last_error = nil,
            partial_answers = 0, cursor_reports = 0 }
-- How long the cursor rests before the plugin reports it (completer/didMoveCursor): a held key reports once.
M.CURSOR_REST_MS = 100

local function client_for(bufnr)
  for _, c in ipairs(vim.lsp.get_clients({ bufnr = bufnr, name = "completer" })) do
    return c
  end
end

--- The ghost text shown now ("" lines joined with "\n"), or nil.
function M.ghost_text()
  local g = M.state.ghost
  return g and table.concat(g.lines, "\n") or nil
end

function M.clear()
  local g = M.state.ghost
  if g and vim.api.nvim_buf_is_valid(g.bufnr) then
    vim.api.nvim_buf_clear_namespace(g.bufnr, ns, 0, -1)
  end
  M.state.ghost = nil
end

local function cancel_pending()
  local p = M.state.pending
  if p then
    local c = vim.lsp.get_client_by_id(p.client_id)
    if c then
      c:cancel_request(p.request_id)
    end
    M.state.cancelled = M.state.cancelled + 1
    M.state.pending = nil
  end
end

--- Text of an InlineCompletionItem (insertText is a string or a StringValue snippet).
local function item_text(item)
  local t = item.insertText
  if type(t) == "table" then
    t = t.value or ""
  end
  return t or ""
end

--- What to show for ``item`` at the cursor (row 0-based, col in bytes): the item replaces ``item.range``
--- (start..cursor on this line); the part the user already typed is not shown again. nil when it does not fit.
function M.visible_text(item, line_text, row, col, encoding)
  local text = item_text(item)
  local r = item.range
  if r then
    if r.start.line ~= row or r["end"].line ~= row then
      return nil
    end
    local start = vim.str_byteindex(line_text, encoding, r.start.character, false)
    local typed = line_text:sub(start + 1, col)
    if start > col or text:sub(1, #typed) ~= typed then
      return nil
    end
    text = text:sub(#typed + 1)
  end
  if text == "" then
    return nil
  end
  return text
end

local function show(bufnr, row, col, text)
  M.clear()
  local lines = vim.split(text, "\n", { plain = true })
  local opts = {
    virt_text = { { lines[1], M.config.hl_group } },
    virt_text_pos = "inline",
    hl_mode = "combine",
  }
  if #lines > 1 then
    local extra = {}
    for i = 2, #lines do
      extra[#extra + 1] = { { lines[i], M.config.hl_group } }
    end
    opts.virt_lines = extra
  end
  local id = vim.api.nvim_buf_set_extmark(bufnr, ns, row, col, opts)
  M.state.ghost = { bufnr = bufnr, row = row, col = col, lines = lines, extmark = id,
                    tick = vim.api.nvim_buf_get_changedtick(bufnr) }
end

--- Ask the server for a completion at the cursor of the current buffer.
function M.request()
  local bufnr = vim.api.nvim_get_current_buf()
  local client = client_for(bufnr)
  if not client then
    return false
  end
  cancel_pending()
  local win = vim.api.nvim_get_current_win()
  local params = vim.lsp.util.make_position_params(win, client.offset_encoding)
  params.context = { triggerKind = 2 } -- Automatic
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local cursor = vim.api.nvim_win_get_cursor(win)
  local started = vim.uv.hrtime()
  local ok, request_id
  ok, request_id = client:request("textDocument/inlineCompletion", params, function(err, result)
    if M.state.pending and M.state.pending.request_id == request_id then
      M.state.pending = nil
    end
    if err then
      if err.code ~= -32800 then -- -32800: cancelled because the user kept typing
        M.state.last_error = err.message
      end
      return
    end
    M.state.last_latency_ms = (vim.uv.hrtime() - started) / 1e6
    -- Stale: the user typed or moved since we asked.
    if not vim.api.nvim_buf_is_valid(bufnr) or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick
      or vim.api.nvim_get_current_buf() ~= bufnr or vim.fn.mode() ~= "i" then
      return
    end
    local now = vim.api.nvim_win_get_cursor(0)
    if now[1] ~= cursor[1] or now[2] ~= cursor[2] then
      return
    end
    local items = result and (result.items or result) or {}
    local item = items[1]
    if not item then
      return
    end
    local row, col = cursor[1] - 1, cursor[2]
    local line_text = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
    local text = M.visible_text(item, line_text, row, col, client.offset_encoding)
    if text then
      show(bufnr, row, col, text)
      if result.partial == true then
        -- what the model had written when the answer was due: ask again at once for the rest (the server answers
        -- the same text's next request when it is there); a keystroke meanwhile makes that answer stale. Asked
        -- here, not scheduled: `pending` is set before this callback returns, so "a ghost and nothing pending"
        -- means the whole answer is shown
        M.state.partial_answers = M.state.partial_answers + 1
        M.state.last_partial = text
        M.request()
      end
    end
  end, bufnr)
  if ok then
    M.state.requests = M.state.requests + 1
    M.state.pending = { client_id = client.id, request_id = request_id }
  end
  return ok
end

--- Insert the ghost text (all of it, or its first line with ``line_only``) at the cursor.
function M.accept(line_only)
  local g = M.state.ghost
  if not g or g.bufnr ~= vim.api.nvim_get_current_buf() then
    return false
  end
  local lines = g.lines
  if line_only and #lines > 1 then
    lines = { lines[1] }
  end
  M.clear()
  vim.api.nvim_buf_set_text(g.bufnr, g.row, g.col, g.row, g.col, lines)
  local end_row = g.row + #lines - 1
  local end_col = (#lines == 1 and g.col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { end_row + 1, end_col })
  -- tell the server what was accepted (lsp/README.md, completer/didAccept): it counts accepted and retained text
  local c = client_for(g.bufnr)
  if c then
    c:notify("completer/didAccept", {
      textDocument = { uri = vim.uri_from_bufnr(g.bufnr) },
      text = table.concat(lines, "\n"),
      kind = (#lines < #g.lines) and "line" or "full",
    })
  end
  return true
end

local function on_edit()
  M.clear()
  cancel_pending()
  if M.config.auto_trigger and vim.fn.mode() == "i" then
    M.request()
  end
end

-- Where the cursor rests other than by typing (lsp/README.md, completer/didMoveCursor): the server prefills the
-- prompt there before the first keystroke. A move that came with an edit (the buffer's changedtick moved since the
-- last move seen there) is typing, which the keystroke's own completion request serves.
local cursor_ticks = {}   -- bufnr -> changedtick at the last cursor move seen in it
local cursor_timer = nil

local function on_cursor_moved(a)
  local bufnr = a.buf
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local seen = cursor_ticks[bufnr]
  cursor_ticks[bufnr] = tick
  if cursor_timer and not cursor_timer:is_closing() then
    cursor_timer:stop()
    cursor_timer:close()
  end
  cursor_timer = nil
  if (seen ~= nil and seen ~= tick) or not client_for(bufnr) then
    return
  end
  cursor_timer = vim.defer_fn(function()
    cursor_timer = nil
    local c = client_for(bufnr)
    if not c or vim.api.nvim_get_current_buf() ~= bufnr or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return
    end
    local params = vim.lsp.util.make_position_params(0, c.offset_encoding)
    c:notify("completer/didMoveCursor", { textDocument = params.textDocument, position = params.position })
    M.state.cursor_reports = M.state.cursor_reports + 1
  end, M.CURSOR_REST_MS)
end

local function attach_keys(bufnr)
  local keys = M.config.keys
  local function map(lhs, active, fn)
    if not lhs then
      return
    end
    vim.keymap.set("i", lhs, function()
      if active() then
        fn()
        return ""
      end
      return lhs -- nothing to act on: the key does what it does without the plugin
    end, { buffer = bufnr, expr = true, replace_keycodes = true, desc = "completer" })
  end
  local shown = function() return M.state.ghost ~= nil end
  -- Inserting through an expr mapping must not run during textlock: schedule the edit.
  map(keys.accept, shown, function() vim.schedule(function() M.accept(false) end) end)
  map(keys.accept_line, shown, function() vim.schedule(function() M.accept(true) end) end)
  -- Dismiss also drops a request still in flight, so that its answer does not appear afterwards.
  map(keys.dismiss, function() return M.state.ghost ~= nil or M.state.pending ~= nil end,
      function() M.clear() cancel_pending() end)
end

local function start(bufnr)
  local ft = vim.bo[bufnr].filetype
  if vim.bo[bufnr].buftype ~= "" or ft == "" then
    return
  end
  if M.config.filetypes and not vim.tbl_contains(M.config.filetypes, ft) then
    return
  end
  local fname = vim.api.nvim_buf_get_name(bufnr)
  local root = vim.fs.root(fname ~= "" and fname or vim.fn.getcwd(), M.config.root_markers) or vim.fn.getcwd()
  vim.lsp.start({
    name = "completer",
    cmd = M.config.cmd,
    root_dir = root,
    init_options = M.config.init_options,
    -- partial answers (lsp/README.md): shown, and the rest asked for at once (M.request)
    capabilities = vim.tbl_deep_extend("force", vim.lsp.protocol.make_client_capabilities(),
                                       { experimental = { partialGhost = true } }),
    flags = { debounce_text_changes = 0 }, -- every keystroke reaches the server, which cancels stale work
    on_error = function(code, err)
      M.state.last_error = tostring(err or code)
    end,
  }, { bufnr = bufnr })
  attach_keys(bufnr)
end

function M.stats(bufnr)
  local client = client_for(bufnr or 0)
  if not client then
    return nil
  end
  local res = client:request_sync("completer/stats", {}, 2000, bufnr or 0)
  return res and res.result
end

local function ms(v)
  return (v == nil or v == vim.NIL) and "-" or string.format(v < 10 and "%.1f ms" or "%.0f ms", v)
end

--- What :CompleterStatus prints: the plugin's counters, then the server's (from completer/stats, or nil), a few
--- lines of words and rounded numbers.
function M.status_text(stats)
  local s = M.state
  local lines = { string.format("completer: %d requests, %d cancelled, last latency %s%s", s.requests, s.cancelled,
    ms(s.last_latency_ms), s.last_error and (", last error: " .. s.last_error) or "") }
  if stats and stats.server then
    local v = stats.server
    table.insert(lines, string.format(
      "server: %d requests, %d answered with ghost text, %d empty, %d from the type-through cache, %d cancelled, "
        .. "%d errors", v.requests_received or 0, v.completions_served or 0, v.empty_completions or 0,
      v.served_from_cache or 0, v.requests_cancelled or 0, v.errors or 0))
    table.insert(lines, string.format("last request: %s to answer, engine %s, first token %s, %s per token",
      ms(v.last_latency_ms), ms(v.last_engine_ms), ms(v.last_ttft_ms), ms(v.last_tpot_ms)))
    local engine = "ready"
    if stats.engineError and stats.engineError ~= vim.NIL then
      engine = "failed: " .. stats.engineError
    elseif not stats.engineReady then
      engine = (stats.engineLoadingS and stats.engineLoadingS ~= vim.NIL)
        and string.format("loading (%.0f s so far)", stats.engineLoadingS) or "not started"
    end
    local cfg = stats.config and stats.config.engine or {}
    table.insert(lines, string.format("engine: %s, model %s, draft %s, speculation %s", engine,
      tostring(cfg.model or "-"), tostring((cfg.draft ~= vim.NIL and cfg.draft) or "none"),
      tostring(cfg.speculation or "-")))
  elseif not stats then
    table.insert(lines, "server: not connected")
  end
  return table.concat(lines, "\n")
end

--- The ghost text's highlight, CompleterGhost: Comment's colours, plus a grey for 256-colour terminals. Neovim
--- 0.11's default Comment has only a GUI colour, so without 'termguicolors' a plain link to Comment drew ghost
--- text in the normal foreground, like code that is really there. `default`: a user's own CompleterGhost wins;
--- set again after every :colorscheme (which clears highlights).
function M.define_highlight()
  local comment = vim.api.nvim_get_hl(0, { name = "Comment", link = false })
  vim.api.nvim_set_hl(0, "CompleterGhost", {
    fg = comment.fg or 0x808080,
    ctermfg = comment.ctermfg or 244,   -- grey in the 256-colour palette
    italic = comment.italic,
    default = true,
  })
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(defaults), opts or {})
  vim.api.nvim_clear_autocmds({ group = group })
  M.define_highlight()
  vim.api.nvim_create_autocmd("ColorScheme", { group = group, callback = M.define_highlight })
  vim.api.nvim_create_autocmd("FileType", { group = group, callback = function(a) start(a.buf) end })
  vim.api.nvim_create_autocmd({ "TextChangedI", "TextChangedP" }, { group = group, callback = on_edit })
  vim.api.nvim_create_autocmd("CursorMovedI", {
    group = group,
    callback = function()
      local g = M.state.ghost
      if g then
        local c = vim.api.nvim_win_get_cursor(0)
        if c[1] - 1 ~= g.row or c[2] ~= g.col then
          on_edit()
        end
      end
    end,
  })
  vim.api.nvim_create_autocmd({ "CursorMoved", "CursorMovedI", "BufEnter" }, { group = group,
                                                                            callback = on_cursor_moved })
  vim.api.nvim_create_autocmd("BufUnload", { group = group, callback = function(a) cursor_ticks[a.buf] = nil end })
  vim.api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, {
    group = group,
    callback = function() M.clear() cancel_pending() end,
  })
  vim.api.nvim_create_user_command("CompleterStatus", function()
    print(M.status_text(M.stats(0)))
  end, {})
  -- Buffers already open when setup() runs.
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(b) then
      start(b)
    end
  end
end

return M
