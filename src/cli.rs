//! The `ruleop` command line: `run` (the operator), `render` and `check` (no cluster
//! needed). The only place that prints to stdout or picks an exit code.

use crate::render::{self, Rendered};
use crate::rules::{self, CompiledRule, LoadError};
use crate::status;
use anyhow::{Context, anyhow, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Writes to stdout, returning I/O errors (a closed pipe is not a panic).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)?
    }};
}

#[derive(Parser, Debug)]
#[command(
    name = "ruleop",
    version,
    about = "A generic Kubernetes operator driven by rules files"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator against the current kubeconfig (or in-cluster config).
    Run(crate::operator::RunArgs),
    /// Print the children a custom resource gets (and, with --observed, its status). No cluster needed.
    Render(RenderArgs),
    /// Load and compile rules files; exit 1 if any has an error. No cluster needed.
    Check(CheckArgs),
    /// Print the least RBAC the given rules need (ClusterRole, or Roles with --namespace).
    Rbac(RbacArgs),
    /// Print the CRDs of the watched kinds, made from the rules' `schema`. No cluster needed.
    Crd(CrdArgs),
}

#[derive(Args, Debug)]
struct CrdArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    rules: Vec<PathBuf>,
}

#[derive(Args, Debug)]
struct RbacArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    rules: Vec<PathBuf>,
    /// Grant access in this namespace only (Roles instead of a ClusterRole).
    #[arg(long)]
    namespace: Option<String>,
    /// Name of the roles and bindings.
    #[arg(long, default_value = "ruleop")]
    name: String,
    /// The operator's ServiceAccount.
    #[arg(long, default_value = "ruleop")]
    service_account: String,
    /// The namespace the operator runs in (its ServiceAccount and Lease are there).
    #[arg(long, default_value = "ruleop-system")]
    operator_namespace: String,
    /// CRD files of the watched kinds (repeat for more): a kind whose CRD has no status
    /// subresource gets `patch` on the resource itself, where ruleop then writes its status.
    #[arg(long)]
    crd: Vec<PathBuf>,
    /// Also grant what `ruleop run --install-crds` needs: reading, creating and patching
    /// the rules' CRDs (a ClusterRole: CRDs are cluster-scoped).
    #[arg(long)]
    install_crds: bool,
}

#[derive(Args, Debug)]
struct LogArgs {
    /// Log format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "RULEOP_LOG_FORMAT"
    )]
    log_format: LogFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Debug)]
struct RenderArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    rules: Vec<PathBuf>,
    /// The rule to use; by default, the one whose watched resource matches the custom resource's kind.
    #[arg(long)]
    rule: Option<String>,
    /// A YAML file with one or more custom resources.
    cr: PathBuf,
    /// A YAML stream of live children (as `kubectl get -o yaml` prints them): also prints the status.
    #[arg(long)]
    observed: Option<PathBuf>,
    /// CRD files (repeat for more): the watched kind's defaults are applied to the custom
    /// resources first, as the API server would.
    #[arg(long)]
    crd: Vec<PathBuf>,
    /// Check every rendered object against its kind's schema (built-in kinds): an unknown
    /// field, a value of the wrong type, a missing required field fails the render.
    #[arg(long)]
    strict: bool,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    rules: Vec<PathBuf>,
    /// CRD files of the watched kinds (repeat for more): every `spec.…` a rule reads must
    /// be a field of its CRD (or of the rule's `defaults`).
    #[arg(long)]
    crd: Vec<PathBuf>,
    /// Also check against the cluster (current kubeconfig): each rule's CRD (from its
    /// `schema`) compared with the one it serves (a change that would break stored
    /// resources is an error), and children of CRD kinds against its `/openapi/v3`.
    #[arg(long)]
    against_cluster: bool,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log.log_format);
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Render(args) => render_cmd(args),
        Command::Check(args) => check(args),
        Command::Rbac(args) => rbac(args),
        Command::Crd(args) => crd_cmd(args),
    };
    match result {
        Ok(code) => code,
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube=warn,tower=warn,hyper=warn"));
    // Colour only on a terminal: a file or a pipe gets plain text.
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

fn run(args: crate::operator::RunArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(crate::operator::run(args))?;
    Ok(ExitCode::SUCCESS)
}

/// Every rule of `paths`, or None (with the errors printed) if any has an error.
fn load_all_or_report(paths: &[PathBuf]) -> Option<Vec<Arc<CompiledRule>>> {
    let (loaded, errors) = rules::load_paths(paths);
    print_errors(&errors);
    errors.is_empty().then_some(loaded)
}

fn print_errors(errors: &[LoadError]) {
    for e in errors {
        eprintln!("error: {e}");
    }
}

/// The rules loaded against what the cluster (current kubeconfig) serves: children of
/// kinds neither built in nor given with `--crd` are checked against the schemas of its
/// `/openapi/v3`, and each rule's CRD is compared with the one it serves (a breaking
/// change is an error).
fn load_against_cluster(
    paths: &[PathBuf],
    given: &[Value],
) -> anyhow::Result<(Vec<Arc<CompiledRule>>, Vec<LoadError>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = kube::Client::try_default().await?;
        let (loaded, _) = rules::load_paths(paths);
        let unknown = unknown_child_kinds(&loaded);
        let served = crate::cache::openapi::schemas(&client, &unknown).await?;
        crate::schema::typed::use_crds(&[given, &served].concat());
        let (loaded, mut errors) = rules::load_paths(paths);
        for rule in &loaded {
            let Some(crd) = &rule.crd else { continue };
            for b in crate::operator::crds::against_cluster(&client, crd).await? {
                errors.push(LoadError::Rule(Box::new(rules::error::RuleProblem {
                    at: rule.at.clone(),
                    rule: rule.name.clone(),
                    child: None,
                    problem: format!("the CRD made from `schema` would break what the cluster stores: {b}"),
                    fix: "make the change additive (a new optional field, a default), or migrate the stored resources first".into(),
                })));
            }
        }
        Ok((loaded, errors))
    })
}

/// The (apiVersion, kind) of children whose schema is neither shipped nor given.
fn unknown_child_kinds(loaded: &[Arc<CompiledRule>]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = loaded
        .iter()
        .flat_map(|r| r.children.iter())
        .filter(|c| crate::schema::typed::builtin(&c.api_version, &c.kind).is_none())
        .filter(|c| crate::schema::typed::from_crds(&c.api_version, &c.kind).is_none())
        .map(|c| (c.api_version.clone(), c.kind.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    // Children of the CRDs' kinds are checked against their schemas too.
    let crds = read_crds(&args.crd)?;
    crate::schema::typed::use_crds(&crds);
    let (loaded, mut errors) = match args.against_cluster {
        true => load_against_cluster(&args.rules, &crds)?,
        false => rules::load_paths(&args.rules),
    };
    for r in &loaded {
        match rules::crd::schema_of(r, &crds) {
            Some(schema) => errors.extend(rules::crd::check_spec_fields(r, schema)),
            None if crds.is_empty() => {}
            None => eprintln!(
                "note: rule `{}`: no CRD given serves {} {}; its spec fields were not checked",
                r.name,
                r.watch.api_version(),
                r.watch.resource
            ),
        }
    }
    print_errors(&errors);
    for r in &loaded {
        let w = &r.watch;
        let gv = w.api_version();
        let kinds: Vec<String> = r
            .children
            .iter()
            .map(|c| format!("{}:{}", c.id, c.kind))
            .collect();
        println!(
            "ok   {} ({}): watches {} {}, children [{}], {} status field(s)",
            r.name,
            r.at,
            gv,
            w.resource,
            kinds.join(", "),
            r.fields.len()
        );
    }
    if errors.is_empty() {
        out!("{} rule(s) ok\n", loaded.len());
        Ok(ExitCode::SUCCESS)
    } else {
        out!("{} rule(s) ok, {} error(s)\n", loaded.len(), errors.len());
        Ok(ExitCode::FAILURE)
    }
}

fn crd_cmd(args: CrdArgs) -> anyhow::Result<ExitCode> {
    let Some(loaded) = load_all_or_report(&args.rules) else {
        return Ok(ExitCode::FAILURE);
    };
    for rule in &loaded {
        match &rule.crd {
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
    let target = crate::rbac::Target {
        name: args.name,
        service_account: args.service_account,
        operator_namespace: args.operator_namespace,
        namespace: args.namespace,
        without_status_subresource: crate::rbac::without_status_subresource(&crds),
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

/// Reads CRDs from files and directories (every `*.yaml`/`*.yml` in them).
fn read_crds(paths: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            files.sort();
            for f in files {
                out.extend(read_objects(&f)?);
            }
        } else {
            out.extend(read_objects(p)?);
        }
    }
    Ok(out)
}

/// Reads a YAML stream of objects.
fn read_objects(path: &PathBuf) -> anyhow::Result<Vec<Value>> {
    use serde::Deserialize;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        // serde_yaml 0.9 can panic on malformed streams: an error, not a crash.
        let v = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Option::<Value>::deserialize(doc)
        }))
        .map_err(|_| anyhow!("{}: malformed YAML", path.display()))?
        .with_context(|| format!("parsing {}", path.display()))?;
        match v {
            Some(Value::Object(mut m)) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = m.remove("items") {
                    out.extend(items);
                }
            }
            Some(v @ Value::Object(_)) => out.push(v),
            Some(_) => bail!("{}: a document is not an object", path.display()),
            None => {}
        }
    }
    Ok(out)
}

/// The rule for `cr`: the one named, the only one, or the one whose group/version match
/// and whose resource is the kind's plural.
fn pick_rule<'a>(
    loaded: &'a [Arc<CompiledRule>],
    name: Option<&str>,
    cr: &Value,
) -> anyhow::Result<&'a CompiledRule> {
    if let Some(n) = name {
        return loaded
            .iter()
            .map(|r| &**r)
            .find(|r| r.name == n)
            .ok_or_else(|| anyhow!("no rule named {n:?}"));
    }
    if let [only] = loaded {
        return Ok(only);
    }
    let api_version = cr
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = cr
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_lowercase();
    let matches: Vec<&CompiledRule> = loaded
        .iter()
        .map(|r| &**r)
        .filter(|r| {
            r.watch.api_version() == api_version
                && (r.watch.resource == format!("{kind}s")
                    || r.watch.resource == format!("{kind}es")
                    || r.watch.resource == kind)
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => bail!("no rule watches {api_version} {kind}; name one with --rule"),
        _ => bail!("several rules watch {api_version} {kind}; name one with --rule"),
    }
}

fn render_cmd(args: RenderArgs) -> anyhow::Result<ExitCode> {
    let Some(loaded) = load_all_or_report(&args.rules) else {
        return Ok(ExitCode::FAILURE);
    };
    let crs = read_objects(&args.cr)?;
    let observed = match &args.observed {
        Some(p) => Some(read_objects(p)?),
        None => None,
    };
    let crds = read_crds(&args.crd)?;
    // With --strict, children of the CRDs' kinds are checked against their schemas too.
    crate::schema::typed::use_crds(&crds);
    let mut failed = false;
    for cr in &crs {
        let rule = pick_rule(&loaded, args.rule.as_deref(), cr)?;
        // The CRD's defaults first, as the API server applies them when it stores the resource.
        let mut defaulted = cr.clone();
        if let Some(schema) = rules::crd::schema_of(rule, &crds) {
            rules::crd::apply_defaults(&mut defaulted, schema);
        }
        let cr = &defaulted;
        let live_objects = observed.as_deref().unwrap_or_default();
        let plan = render::scope(rule, cr)
            .and_then(|s| offline_existing(rule, s, live_objects))
            .and_then(|s| {
                let live = |r: &Rendered| find_live(r, live_objects);
                Ok((render::render_with(rule, &s, &live)?, s))
            });
        let (plan, scope) = match plan {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: rule `{}`: {e}", rule.name);
                failed = true;
                continue;
            }
        };
        if args.strict && !(resource_ok(rule, cr, &crds) & strict_ok(&plan.children)) {
            failed = true;
            continue;
        }
        for c in &plan.children {
            out!("---\n{}", serde_yaml::to_string(&c.object)?);
        }
        for w in &plan.waiting {
            eprintln!("note: {}: child `{}` {}", scope.name, w.id, w.reason);
        }
        if let Some(live) = &observed {
            let by_id = match_observed(&plan.children, live);
            let report = status::compute(rule, &scope, cr, Some(&plan), &by_id);
            let doc = serde_json::json!({
                "status": report.fields,
                "ready": report.ready,
                "notes": report.notes,
                "problems": report.problems,
            });
            out!(
                "--- # status of {}\n{}",
                scope.name,
                serde_yaml::to_string(&doc)?
            );
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Checks the custom resource (with its defaults) against its kind's schema, as the API
/// server would when it is created; prints what is wrong.
fn resource_ok(rule: &CompiledRule, cr: &Value, crds: &[Value]) -> bool {
    let Some(schema) = rules::crd::schema_of(rule, crds) else {
        return true;
    };
    let name = cr["metadata"]["name"].as_str().unwrap_or("?");
    let what = format!("resource `{name}` ({})", cr["kind"].as_str().unwrap_or("?"));
    report_findings(&what, crate::schema::typed::check_object(cr, schema))
}

/// Checks rendered objects against their kinds' schemas; prints what is wrong.
fn strict_ok(children: &[Rendered]) -> bool {
    let mut ok = true;
    for c in children {
        let from_crd = crate::schema::typed::from_crds(&c.api_version, &c.kind);
        let Some(schema) =
            crate::schema::typed::builtin(&c.api_version, &c.kind).or(from_crd.as_ref())
        else {
            continue;
        };
        let what = format!("child `{}` ({} {})", c.instance(), c.kind, c.name);
        ok &= report_findings(&what, crate::schema::typed::check_object(&c.object, schema));
    }
    ok
}

/// Prints each finding about `what`; whether there were none.
fn report_findings(what: &str, findings: Vec<crate::schema::typed::Finding>) -> bool {
    for f in &findings {
        let field = if f.field.is_empty() {
            "object"
        } else {
            &f.field
        };
        eprintln!("error: {what}: {field}: {}\n  fix: {}", f.problem, f.fix);
    }
    findings.is_empty()
}

/// The live object of a rendered child among `live`, by apiVersion, kind and name.
fn find_live(c: &Rendered, live: &[Value]) -> Option<Value> {
    live.iter()
        .find(|o| {
            o.get("apiVersion").and_then(Value::as_str) == Some(c.api_version.as_str())
                && o.get("kind").and_then(Value::as_str) == Some(c.kind.as_str())
                && o.pointer("/metadata/name").and_then(Value::as_str) == Some(c.name.as_str())
        })
        .cloned()
}

/// Pairs live objects with rendered children (by instance: `id`, or `id[index]`).
fn match_observed(children: &[Rendered], live: &[Value]) -> HashMap<String, Value> {
    children
        .iter()
        .filter_map(|c| Some((c.instance(), find_live(c, live)?)))
        .collect()
}

/// The rule's existing objects, found among the `--observed` objects (those of the
/// resource's namespace, or with none given).
fn offline_existing(
    rule: &CompiledRule,
    scope: render::Scope,
    live: &[Value],
) -> Result<render::Scope, render::RenderError> {
    let ns = scope.namespace.clone();
    let candidates = |i: usize, _: &render::Lookup| {
        let e = &rule.existing[i];
        live.iter()
            .filter(|o| {
                o.get("apiVersion").and_then(Value::as_str) == Some(e.api_version.as_str())
                    && o.get("kind").and_then(Value::as_str) == Some(e.kind.as_str())
                    && o.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .is_none_or(|n| n == ns)
            })
            .cloned()
            .collect()
    };
    Ok(render::find_existing(rule, scope, candidates)?.0)
}
