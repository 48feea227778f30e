//! `ruleop lsp`: a language server over stdio for rules files, on rust-analyzer's
//! `lsp-server` (the protocol's framing and message loop, synchronous: nothing here needs
//! an async runtime) and `lsp-types`. It gives, as a file is typed:
//!
//! - diagnostics: every error `ruleop check` reports offline, at its line, its range the
//!   word the message is about, debounced ([`DEBOUNCE`]) ([`diagnose`]);
//! - completion: the fields of the object a path reads (a child's kind by its schema, the
//!   watched kind by the rule's `schema:`), child ids, the keys of the rules format
//!   ([`complete`]);
//! - hover and go to definition ([`hover`]); code actions for every "did you mean".
//!
//! The kinds' schemas: the built-in kinds' shipped in the binary, CRDs from `--crd` or the
//! client's `initializationOptions.crds` (paths of files or folders).
//!
//! Uses: `rules` (the loader and its errors), `schema` (the kinds' schemas). Used by: the
//! command line.

mod complete;
mod diagnose;
mod document;
mod fields;
mod hover;
mod paths;
mod snippets;

use document::Document;
use lsp_server::{Connection, Message, Notification, Request, RequestId, Response};
use lsp_types::notification::{self as note, Notification as _};
use lsp_types::request::{self as req, Request as _};
use lsp_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, CodeActionParams,
    CodeActionProviderCapability, CompletionOptions, CompletionParams, Diagnostic,
    GotoDefinitionParams, GotoDefinitionResponse, HoverParams, HoverProviderCapability, Location,
    OneOf, Position, PublishDiagnosticsParams, Range, ServerCapabilities,
    TextDocumentSyncCapability, TextDocumentSyncKind, TextEdit, Uri, WorkspaceEdit,
};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

/// How long the server waits after a change for the next one before it checks the file.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum LspError {
    #[error("the language server's connection: {0}")]
    Protocol(#[from] lsp_server::ProtocolError),
    #[error("the language server's connection closed: {0}")]
    Closed(String),
    #[error("{0}")]
    Crds(String),
}

/// Reads the CRDs of files and folders (the command line's reader).
pub type ReadCrds = fn(&[PathBuf]) -> anyhow::Result<Vec<Value>>;

/// Serves the protocol on stdin and stdout until the client shuts it down.
pub fn serve(crds: &[PathBuf], read: ReadCrds) -> Result<(), LspError> {
    let (connection, threads) = Connection::stdio();
    let caps = serde_json::to_value(capabilities()).expect("capabilities serialize");
    let init = connection.initialize(caps)?;
    let mut paths: Vec<PathBuf> = crds.to_vec();
    if let Some(more) = init["initializationOptions"]["crds"].as_array() {
        paths.extend(more.iter().filter_map(Value::as_str).map(PathBuf::from));
    }
    if !paths.is_empty() {
        let found = read(&paths).map_err(|e| LspError::Crds(e.to_string()))?;
        crate::schema::typed::use_crds(&found);
    }
    Server::default().run(&connection)?;
    drop(connection);
    threads.join().map_err(|e| LspError::Closed(e.to_string()))
}

fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".into(), " ".into(), "[".into()]),
            ..Default::default()
        }),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
        ..Default::default()
    }
}

#[derive(Default)]
struct Server {
    docs: HashMap<Uri, Document>,
    /// Files changed since their diagnostics were last published.
    dirty: BTreeSet<String>,
    uris: HashMap<String, Uri>,
}

impl Server {
    fn run(&mut self, c: &Connection) -> Result<(), LspError> {
        loop {
            let msg = if self.dirty.is_empty() {
                c.receiver
                    .recv()
                    .map_err(|e| LspError::Closed(e.to_string()))?
            } else {
                match c.receiver.recv_timeout(DEBOUNCE) {
                    Ok(m) => m,
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        self.publish_dirty(c)?;
                        continue;
                    }
                    Err(e) => return Err(LspError::Closed(e.to_string())),
                }
            };
            match msg {
                Message::Request(r) => {
                    if c.handle_shutdown(&r)? {
                        return Ok(());
                    }
                    let resp = self.answer(r);
                    send(c, Message::Response(resp))?;
                }
                Message::Notification(n) => self.notified(c, n)?,
                Message::Response(_) => {}
            }
        }
    }

    fn notified(&mut self, c: &Connection, n: Notification) -> Result<(), LspError> {
        match n.method.as_str() {
            note::DidOpenTextDocument::METHOD => {
                let Ok(p) =
                    serde_json::from_value::<lsp_types::DidOpenTextDocumentParams>(n.params)
                else {
                    return Ok(());
                };
                let uri = p.text_document.uri;
                self.docs
                    .insert(uri.clone(), Document::parse(&p.text_document.text));
                self.publish(c, &uri)?;
            }
            note::DidChangeTextDocument::METHOD => {
                let Ok(p) =
                    serde_json::from_value::<lsp_types::DidChangeTextDocumentParams>(n.params)
                else {
                    return Ok(());
                };
                if let Some(change) = p.content_changes.into_iter().last() {
                    let uri = p.text_document.uri;
                    self.docs.insert(uri.clone(), Document::parse(&change.text));
                    self.dirty.insert(uri.as_str().to_string());
                    self.uris.insert(uri.as_str().to_string(), uri);
                }
            }
            note::DidSaveTextDocument::METHOD => {}
            note::DidCloseTextDocument::METHOD => {
                let Ok(p) =
                    serde_json::from_value::<lsp_types::DidCloseTextDocumentParams>(n.params)
                else {
                    return Ok(());
                };
                self.docs.remove(&p.text_document.uri);
                self.dirty.remove(p.text_document.uri.as_str());
                publish_params(c, p.text_document.uri, Vec::new())?;
            }
            _ => {}
        }
        Ok(())
    }

    fn publish_dirty(&mut self, c: &Connection) -> Result<(), LspError> {
        for key in std::mem::take(&mut self.dirty) {
            if let Some(uri) = self.uris.get(&key).cloned() {
                self.publish(c, &uri)?;
            }
        }
        Ok(())
    }

    fn publish(&self, c: &Connection, uri: &Uri) -> Result<(), LspError> {
        let Some(doc) = self.docs.get(uri) else {
            return Ok(());
        };
        let diagnostics = diagnose::diagnostics(&file_path(uri), doc);
        publish_params(c, uri.clone(), diagnostics)
    }

    fn answer(&self, r: Request) -> Response {
        let id = r.id.clone();
        let result = match r.method.as_str() {
            req::Completion::METHOD => self.completion(r.params),
            req::HoverRequest::METHOD => self.hover(r.params),
            req::GotoDefinition::METHOD => self.definition(r.params),
            req::CodeActionRequest::METHOD => self.code_actions(r.params),
            _ => return unknown(id, &r.method),
        };
        Response::new_ok(id, result.unwrap_or(Value::Null))
    }

    fn at(&self, p: &lsp_types::TextDocumentPositionParams) -> Option<(&Document, Position)> {
        Some((self.docs.get(&p.text_document.uri)?, p.position))
    }

    fn completion(&self, params: Value) -> Option<Value> {
        let p: CompletionParams = serde_json::from_value(params).ok()?;
        let (doc, pos) = self.at(&p.text_document_position)?;
        serde_json::to_value(complete::complete(doc, pos.line, pos.character)).ok()
    }

    fn hover(&self, params: Value) -> Option<Value> {
        let p: HoverParams = serde_json::from_value(params).ok()?;
        let (doc, pos) = self.at(&p.text_document_position_params)?;
        serde_json::to_value(hover::hover(doc, pos.line, pos.character)?).ok()
    }

    fn definition(&self, params: Value) -> Option<Value> {
        let p: GotoDefinitionParams = serde_json::from_value(params).ok()?;
        let (doc, pos) = self.at(&p.text_document_position_params)?;
        let line = hover::definition(doc, pos.line, pos.character)?;
        let text = doc.line(line);
        let col = text.find("id:").map_or(0, |c| c as u32 + 4);
        let at = Position::new(line, col);
        let uri = p.text_document_position_params.text_document.uri;
        let loc = Location::new(uri, Range::new(at, at));
        serde_json::to_value(GotoDefinitionResponse::Scalar(loc)).ok()
    }

    /// Each "did you mean" of the diagnostics in range, as an edit.
    fn code_actions(&self, params: Value) -> Option<Value> {
        let p: CodeActionParams = serde_json::from_value(params).ok()?;
        let actions: Vec<CodeActionOrCommand> = p
            .context
            .diagnostics
            .iter()
            .filter_map(|d| fix(&p.text_document.uri, d))
            .collect();
        serde_json::to_value(actions).ok()
    }
}

fn fix(uri: &Uri, d: &Diagnostic) -> Option<CodeActionOrCommand> {
    let replace = d.data.as_ref()?["replace"].as_str()?.to_string();
    let edit = TextEdit::new(d.range, replace.clone());
    Some(CodeActionOrCommand::CodeAction(CodeAction {
        title: format!("change to `{replace}`"),
        kind: Some(CodeActionKind::QUICKFIX),
        diagnostics: Some(vec![d.clone()]),
        edit: Some(WorkspaceEdit::new(HashMap::from([(
            uri.clone(),
            vec![edit],
        )]))),
        is_preferred: Some(true),
        ..Default::default()
    }))
}

fn unknown(id: RequestId, method: &str) -> Response {
    Response::new_err(
        id,
        lsp_server::ErrorCode::MethodNotFound as i32,
        format!("ruleop lsp does not answer {method}"),
    )
}

fn send(c: &Connection, m: Message) -> Result<(), LspError> {
    c.sender
        .send(m)
        .map_err(|e| LspError::Closed(e.to_string()))
}

fn publish_params(c: &Connection, uri: Uri, diagnostics: Vec<Diagnostic>) -> Result<(), LspError> {
    let params = PublishDiagnosticsParams::new(uri, diagnostics, None);
    let n = Notification::new(note::PublishDiagnostics::METHOD.to_string(), params);
    send(c, Message::Notification(n))
}

/// The file a `file://` URI names (percent-decoded); its name is what errors carry.
fn file_path(uri: &Uri) -> PathBuf {
    let s = uri.as_str();
    let path = s.strip_prefix("file://").unwrap_or(s);
    PathBuf::from(
        percent_encoding::percent_decode_str(path)
            .decode_utf8_lossy()
            .into_owned(),
    )
}
