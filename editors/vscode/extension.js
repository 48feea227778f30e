// ruleop's language server in VS Code: `ruleop lsp` for every YAML file of the workspace.
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate() {
  const cfg = vscode.workspace.getConfiguration("ruleop");
  const server = { command: cfg.get("path") || "ruleop", args: ["lsp"] };
  client = new LanguageClient("ruleop", "ruleop", server, {
    documentSelector: [{ scheme: "file", language: "yaml" }],
    initializationOptions: { crds: cfg.get("crds") || [] },
  });
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
