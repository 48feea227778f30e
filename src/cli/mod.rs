//! The `ruleop` command line: `run` (the operator), `render`, `check`, `test` and
//! `schema` (no cluster needed, but for `check --against-cluster` and `test --server`),
//! `rbac` and `crd`. The only place that prints to stdout or picks an exit code.
//!
//! Owns: the arguments ([`args`]), reading rules, CRDs and objects ([`input`]), `check`
//! ([`check`]), `render` ([`render`]), `test` ([`test`]) and the API server as the
//! validator ([`server`]). Uses: everything below it. Used by: `main.rs`.

/// Writes to stdout, returning I/O errors (a closed pipe is not a panic).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod args;
mod check;
mod diff;
mod input;
mod label;
mod output;
mod release;
mod render;
mod resolve;
mod rule;
mod server;
mod test;
mod trace;

use args::{Cli, Command, CrdArgs, LogFormat, RbacArgs, SchemaArgs};
use clap::Parser;
use input::{load_all_or_report, read_crds};
use std::process::ExitCode;

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let _traces = match init_logging(cli.log.log_format, &cli.command) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    crate::client::set_target(crate::client::Target {
        kubeconfig: cli.target.kubeconfig.clone(),
        context: cli.target.context.clone(),
    });
    let result = match cli.command {
        Command::Run(args) => run(*args),
        Command::Render(args) => render::render_cmd(args),
        Command::Check(args) => check::check(args),
        Command::Rbac(args) => rbac(args),
        Command::Crd(args) => crd_cmd(args),
        Command::Test(args) => test::test_cmd(args),
        Command::Schema(args) => schema_cmd(&args),
        Command::Rule(args) => rule::rule_cmd(args),
        Command::Diff(args) => diff::diff_cmd(args),
        Command::Trace(args) => trace::trace_cmd(args),
        Command::Release(args) => release::release_cmd(args),
        Command::Completion(args) => completion(&args),
        Command::Lsp(args) => crate::lsp::serve(&args.crd, input::read_crds)
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
    };
    match result {
        Ok(code) => code,
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        // Could not run (a cluster unreachable, a file unreadable): 2, as for a usage
        // error; 1 says the rules (or the tests) are wrong.
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `ruleop completion SHELL`: the shell's completion script.
fn completion(args: &args::CompletionArgs) -> anyhow::Result<ExitCode> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "ruleop", &mut out);
    Ok(ExitCode::SUCCESS)
}

/// Logs to stderr; with `run --otlp-endpoint`, reconciles are also sent as traces
/// (the handle returned flushes them when dropped).
fn init_logging(
    format: LogFormat,
    command: &Command,
) -> anyhow::Result<Option<crate::operator::telemetry::Traces>> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _};
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube=warn,tower=warn,hyper=warn"));
    // Colour only on a terminal: a file or a pipe gets plain text.
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
        LogFormat::Text => fmt.boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(filter));
    let otlp = match command {
        Command::Run(args) => args
            .telemetry
            .otlp_endpoint
            .as_deref()
            .map(|e| (e, args.telemetry.otlp_protocol)),
        _ => None,
    };
    match otlp {
        Some((endpoint, protocol)) => {
            let (layer, traces) = crate::operator::telemetry::setup(endpoint, protocol)?;
            registry.with(layer).init();
            tracing::info!(endpoint, "sending a trace per reconcile over OTLP");
            Ok(Some(traces))
        }
        None => {
            registry.init();
            Ok(None)
        }
    }
}

fn run(args: crate::operator::RunArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(crate::operator::run(args))?;
    Ok(ExitCode::SUCCESS)
}

fn crd_cmd(args: CrdArgs) -> anyhow::Result<ExitCode> {
    if args.rule_kind {
        out!(
            "# The Rule kind, by `ruleop crd --rule-kind`. Do not edit: regenerate.\n---\n{}",
            serde_yaml::to_string(&crate::rules::object::crd())?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some(loaded) = load_all_or_report(&args.rules) else {
        return Ok(ExitCode::FAILURE);
    };
    let service = args
        .webhook_service
        .split_once('/')
        .map(|(ns, name)| (ns.to_string(), name.to_string()))
        .ok_or_else(|| anyhow::anyhow!("--webhook-service: give it as namespace/name"))?;
    let client_config =
        crate::operator::webhook::conversion_client_config(args.webhook_url.as_deref(), &service);
    let ca = match &args.ca_bundle {
        Some(file) => {
            use base64::Engine as _;
            let pem = std::fs::read(file)
                .map_err(|e| anyhow::anyhow!("--ca-bundle {}: {e}", file.display()))?;
            Some(base64::engine::general_purpose::STANDARD.encode(pem))
        }
        None => None,
    };
    for rule in &loaded {
        let crd = rule
            .crd
            .clone()
            .map(|c| crate::schema::crd::with_conversion(c, client_config.clone(), ca.as_deref()));
        match &crd {
            Some(crd) => out!(
                "# Generated from {} (rule `{}`) by `ruleop crd`. Do not edit: regenerate.\n---\n{}",
                rule.at.file.display(),
                rule.name,
                serde_yaml::to_string(crd)?
            ),
            None => eprintln!(
                "note: rule `{}` ({}) has no `schema`: no CRD made for it",
                rule.name, rule.at
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rbac(args: RbacArgs) -> anyhow::Result<ExitCode> {
    let Some(loaded) = load_all_or_report(&args.rules) else {
        return Ok(ExitCode::FAILURE);
    };
    let crds = read_crds(&args.crd)?;
    let without: Vec<&crate::rules::CompiledRule> = loaded
        .iter()
        .filter(|r| r.identity.is_none())
        .map(|r| &**r)
        .collect();
    if args.per_rule && !without.is_empty() {
        for r in without {
            eprintln!(
                "{}: error: rule {:?} names no ServiceAccount, and --per-rule runs every rule as its own\n  fix: add to the rule `serviceAccount: {{name: {}-{}, namespace: {}}}` (or drop --per-rule: it then shares ruleop's own role)",
                r.at, r.name, args.name, r.name, args.operator_namespace
            );
        }
        return Ok(ExitCode::FAILURE);
    }
    let target = crate::rbac::Target {
        name: args.name,
        service_account: args.service_account,
        operator_namespace: args.operator_namespace,
        namespace: args.namespace,
        without_status_subresource: crate::rbac::without_status_subresource(&crds),
        plurals: crate::rbac::plurals(&crds),
        install_crds: args.install_crds,
    };
    let names: Vec<&str> = loaded.iter().map(|r| r.name.as_str()).collect();
    out!(
        "# Generated by `ruleop rbac` for rules: {}. Do not edit: regenerate.\n",
        names.join(", ")
    );
    for m in crate::rbac::manifests(&loaded, &target) {
        out!("---\n{}", serde_yaml::to_string(&m)?);
    }
    Ok(ExitCode::SUCCESS)
}

fn schema_cmd(args: &SchemaArgs) -> anyhow::Result<ExitCode> {
    let schema = if args.tests {
        crate::ruletest::spec::json_schema()
    } else {
        crate::rules::spec::json_schema()
    };
    out!("{}\n", serde_json::to_string_pretty(&schema)?);
    Ok(ExitCode::SUCCESS)
}
