-- The Neovim side of tests/neovim.rs: editors/nvim/ruleop.lua set up as a user would, the
-- rule opened, and what the language server gave written as JSON to $RULEOP_OUT:
-- the diagnostics, a completion list, a hover and a definition at the positions of $RULEOP_AT.
local config = dofile(os.getenv("RULEOP_NVIM_CONFIG"))
config.setup({ cmd = { os.getenv("RULEOP_BIN"), "lsp" } })
vim.cmd("filetype on")
vim.cmd("edit " .. vim.fn.fnameescape(os.getenv("RULEOP_FILE")))
local buf = vim.api.nvim_get_current_buf()
local at = vim.fn.json_decode(os.getenv("RULEOP_AT"))
local out = { diagnostics = {}, completion = {}, filetype = vim.bo.filetype }

vim.wait(15000, function() return #vim.diagnostic.get(buf) > 0 end, 50)
for _, d in ipairs(vim.diagnostic.get(buf)) do
  table.insert(out.diagnostics, { line = d.lnum, col = d.col, end_col = d.end_col, message = d.message })
end

local function request(method, pos)
  local params = {
    textDocument = vim.lsp.util.make_text_document_params(buf),
    position = { line = pos[1], character = pos[2] },
  }
  local res = vim.lsp.buf_request_sync(buf, method, params, 10000)
  for _, r in pairs(res or {}) do
    if r.result then return r.result end
  end
end

local items = request("textDocument/completion", at.completion) or {}
for _, i in ipairs(items.items or items) do table.insert(out.completion, i.label) end
local hover = request("textDocument/hover", at.hover)
out.hover = hover and hover.contents and hover.contents.value or ""
local def = request("textDocument/definition", at.definition)
if def and def[1] then def = def[1] end
out.definition = def and def.range and def.range.start.line or -1

local f = assert(io.open(os.getenv("RULEOP_OUT"), "w"))
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd("qa!")
