// Starts `failover lsp` for .rules files (diagnostics, hover, definition,
// completion, formatting); highlighting comes from the TextMate grammar.
'use strict';
const vscode = require('vscode');
const { LanguageClient, TransportKind } = require('vscode-languageclient/node');

let client;

function activate(context) {
  const command = vscode.workspace.getConfiguration('failover').get('path') || 'failover';
  const server = { command, args: ['lsp'], transport: TransportKind.stdio };
  client = new LanguageClient(
    'failover',
    'failover rules',
    { run: server, debug: server },
    { documentSelector: [{ scheme: 'file', language: 'failover-rules' }] }
  );
  context.subscriptions.push({ dispose: () => client && client.stop() });
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
