-- ruleop's language server in Neovim (0.7 and later): put this file on your runtimepath
-- (say ~/.config/nvim/lua/ruleop.lua) and `require("ruleop").setup()` in init.lua, or
-- `:luafile` it. Every YAML buffer gets `ruleop lsp` (one server per Neovim): the checks of
-- `ruleop check` as you type, completion (<C-x><C-o>), hover (K), go to definition (gd)
-- and quick fixes (vim.lsp.buf.code_action).
--
-- Options: cmd (default {"ruleop", "lsp"}), crds (files or folders of CRDs whose kinds
-- children may have), filetypes (default {"yaml"}).
local M = {}

function M.setup(opts)
  opts = opts or {}
  local config = {
    name = "ruleop",
    cmd = opts.cmd or { "ruleop", "lsp" },
    root_dir = opts.root_dir or vim.loop.cwd(),
    init_options = { crds = opts.crds or {} },
  }
  local client_id
  local function attach(args)
    local buf = args and args.buf or vim.api.nvim_get_current_buf()
    if vim.lsp.start then
      vim.lsp.start(config, { bufnr = buf })
      return
    end
    -- Neovim 0.7: one client, attached to each buffer.
    if not client_id or vim.lsp.client_is_stopped(client_id) then
      client_id = vim.lsp.start_client(config)
    end
    vim.lsp.buf_attach_client(buf, client_id)
    vim.api.nvim_buf_set_option(buf, "omnifunc", "v:lua.vim.lsp.omnifunc")
  end
  vim.api.nvim_create_autocmd("FileType", {
    pattern = opts.filetypes or { "yaml" },
    callback = attach,
  })
  return attach
end

return M
