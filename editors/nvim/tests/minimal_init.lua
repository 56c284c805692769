-- Test/demo init: `nvim --clean -u editors/nvim/tests/minimal_init.lua FILE`.
-- COMPLETER_NVIM_CONFIG (JSON) is passed to setup(): {"cmd": [...], "init_options": {...}}.
local here = debug.getinfo(1, "S").source:sub(2)
local plugin = vim.fn.fnamemodify(here, ":p:h:h")
vim.opt.runtimepath:prepend(plugin)
vim.opt.swapfile = false
vim.opt.shadafile = "NONE"
local cfg = os.getenv("COMPLETER_NVIM_CONFIG")
require("completer").setup(cfg and vim.json.decode(cfg) or {})
