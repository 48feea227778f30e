//! The command line's arguments, subcommand by subcommand.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "ruleop",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("RULEOP_COMMIT"), ")"),
    about = "A generic Kubernetes operator driven by rules files"
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
    #[command(flatten)]
    pub(super) log: LogArgs,
    #[command(flatten)]
    pub(super) target: TargetArgs,
}

/// Which cluster the commands that need one talk to.
#[derive(Args, Debug)]
pub(super) struct TargetArgs {
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else in-cluster).
    #[arg(long, global = true)]
    pub(super) kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context (default: its current context).
    #[arg(long, global = true)]
    pub(super) context: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Run the operator against the current kubeconfig (or in-cluster config).
    Run(Box<crate::operator::RunArgs>),
    /// Print the children a custom resource gets (and, with --observed, its status). No cluster needed.
    Render(RenderArgs),
    /// Load and compile rules files; exit 1 if any has an error. No cluster needed.
    Check(CheckArgs),
    /// Print the least RBAC the given rules need (ClusterRole, or Roles with --namespace).
    Rbac(RbacArgs),
    /// Print the CRDs of the watched kinds, made from the rules' `schema`. No cluster needed.
    Crd(CrdArgs),
    /// Run the tests of rules (`*_test.yaml` files). No cluster needed.
    Test(TestArgs),
    /// Print the JSON Schema of the rules format (or, with --tests, of test files), for editors.
    Schema(SchemaArgs),
    /// Print rules files as Rule objects, for `kubectl apply -f -`. No cluster needed.
    Rule(RuleArgs),
    /// What a rule change would do to every live resource of its kind (or, offline, to the
    /// resources given): children created, changed, deleted, pods restarted. Exit 0 when
    /// nothing changes, 1 when something would, 2 on error.
    Diff(DiffArgs),
    /// A resource and the children its rule made, as a tree with Synced and Ready per
    /// node, the root cause first (the deepest node that fails, with its whole message),
    /// the Rule revision in force and the last Events.
    Trace(TraceArgs),
    /// With ruleop stopped (an uninstall, a hand-over): let a rule's resources and children
    /// go. ruleop's finalizers come off every resource; every child loses its owner
    /// reference to its resource and ruleop's labels and annotations, and keeps running.
    Release(ReleaseArgs),
    /// Print the shell's completion script: `source <(ruleop completion bash)`.
    Completion(CompletionArgs),
    /// A language server for rules files over stdio, for editors: every check as you type,
    /// completion, hover, go to definition, quick fixes. No cluster needed.
    Lsp(LspArgs),
}

#[derive(Args, Debug)]
pub(super) struct LspArgs {
    /// CRDs (files or folders) whose kinds children may have, checked and completed by
    /// their schemas (the client's `initializationOptions.crds` adds more).
    #[arg(long)]
    pub(super) crd: Vec<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub(super) struct CompletionArgs {
    /// bash, zsh, fish, elvish or powershell.
    pub(super) shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub(super) struct ReleaseArgs {
    /// The rule's name.
    #[arg(long)]
    pub(super) rule: String,
    /// Its rules files (default: the cluster's Rule object of that name).
    #[arg(long)]
    pub(super) rules: Vec<PathBuf>,
    /// Only its resources in this namespace (as `ruleop run --namespace` served them).
    #[arg(long)]
    pub(super) namespace: Option<String>,
    /// Where ruleop kept its inventory (the kinds each rule made, earlier versions too).
    #[arg(long, default_value = "ruleop-system")]
    pub(super) operator_namespace: String,
}

#[derive(Args, Debug)]
pub(super) struct DiffArgs {
    /// The new rules (files, folders, or files of Rule objects); offline, the old ones.
    #[arg(long, required = true)]
    pub(super) rules: Vec<PathBuf>,
    /// Offline: the new rules, compared with --rules on the resources given.
    #[arg(long)]
    pub(super) to: Vec<PathBuf>,
    /// Offline: files of custom resources (without them, the cluster's are read).
    pub(super) resources: Vec<PathBuf>,
    /// Offline: objects in the cluster (existing objects, live children), as `kubectl get
    /// -o yaml` prints them.
    #[arg(long)]
    pub(super) observed: Option<PathBuf>,
    /// Offline: the kind's CRD as the cluster has it (files or folders), for a rule with no
    /// `schema`: its defaults are what the stored resources hold.
    #[arg(long)]
    pub(super) crd: Vec<PathBuf>,
    /// Against the cluster: this namespace only (default: all).
    #[arg(long)]
    pub(super) namespace: Option<String>,
    /// Name what changes without the field diffs.
    #[arg(long)]
    pub(super) brief: bool,
    /// `text`, or the changes as a `json` or `yaml` document.
    #[arg(short, long, value_enum, default_value = "text")]
    pub(super) output: super::output::Output,
}

#[derive(Args, Debug)]
pub(super) struct RuleArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    pub(super) rules: Vec<PathBuf>,
    /// A label `key=value` on every Rule printed (repeat for more), such as the one an
    /// installation's `--rule-selector` selects.
    #[arg(long = "label", short = 'l', value_name = "KEY=VALUE", value_parser = super::label::parse_label)]
    pub(super) labels: Vec<(String, String)>,
}

#[derive(Args, Debug)]
pub(super) struct SchemaArgs {
    /// The schema of test files (`*_test.yaml`) instead.
    #[arg(long)]
    pub(super) tests: bool,
}

#[derive(Args, Debug)]
pub(super) struct TestArgs {
    /// Test files, or folders searched for `*_test.yaml` (default: the current folder).
    pub(super) paths: Vec<PathBuf>,
    /// Write the report as JUnit XML to this file too.
    #[arg(long)]
    pub(super) junit: Option<PathBuf>,
    /// Write what each step gives as the snapshot beside each test file
    /// (`<name>_test.snap.yaml`), for review, instead of comparing with it.
    #[arg(long)]
    pub(super) update: bool,
    /// Also send each step's children to the cluster (current kubeconfig) as server-side
    /// dry-run applies: what the API server or its admission webhooks refuse fails the step.
    #[arg(long)]
    pub(super) server: bool,
    /// CRDs (files or folders) of the children's kinds: each child of their kinds is checked
    /// against its schema and CEL rules, as the built-in kinds' children are.
    #[arg(long)]
    pub(super) crd: Vec<PathBuf>,
    /// `text`, or the results as a `json` or `yaml` document.
    #[arg(short, long, value_enum, default_value = "text")]
    pub(super) output: super::output::Output,
}

#[derive(Args, Debug)]
pub(super) struct CrdArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required_unless_present = "rule_kind")]
    pub(super) rules: Vec<PathBuf>,
    /// Print the CRD of the Rule kind (`rules.ruleop.dev`) instead.
    #[arg(long, conflicts_with = "rules")]
    pub(super) rule_kind: bool,
    /// A kind in several versions: the Service `namespace/name` (port 443) of ruleop's
    /// conversion webhook, as `ruleop run --webhook-service` says it...
    #[arg(long, default_value = "ruleop-system/ruleop-webhook")]
    pub(super) webhook_service: String,
    /// ...or its URL, as `ruleop run --webhook-url` (which wins).
    #[arg(long)]
    pub(super) webhook_url: Option<String>,
    /// The CA (a PEM file) the API server trusts the conversion webhook by: the `ca.crt`
    /// of ruleop's webhook Secret (`<webhook-name>-webhook-tls`) where that Secret is made
    /// ahead of ruleop. Without it, the CRD has no `caBundle`: the leader writes its own
    /// CA into it (and keeps it) once it runs.
    #[arg(long)]
    pub(super) ca_bundle: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(super) struct RbacArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    pub(super) rules: Vec<PathBuf>,
    /// Grant access in this namespace only (Roles instead of a ClusterRole).
    #[arg(long)]
    pub(super) namespace: Option<String>,
    /// Name of the roles and bindings.
    #[arg(long, default_value = "ruleop")]
    pub(super) name: String,
    /// The operator's ServiceAccount.
    #[arg(long, default_value = "ruleop")]
    pub(super) service_account: String,
    /// The namespace the operator runs in (its ServiceAccount and Lease are there).
    #[arg(long, default_value = "ruleop-system")]
    pub(super) operator_namespace: String,
    /// CRD files of the watched kinds (repeat for more): a kind whose CRD has no status
    /// subresource gets `patch` on the resource itself, where ruleop then writes its status.
    #[arg(long)]
    pub(super) crd: Vec<PathBuf>,
    /// Also grant what `ruleop run --install-crds` needs: reading, creating and patching
    /// the rules' CRDs (a ClusterRole: CRDs are cluster-scoped).
    #[arg(long)]
    pub(super) install_crds: bool,
    /// Every rule runs as its own ServiceAccount (`serviceAccount:` in each rule): print,
    /// for each, the account, a role with exactly what it needs and the binding; ruleop's
    /// own role keeps only the Rules, its Lease, Events, its inventory and `impersonate` on
    /// those accounts. A rule without `serviceAccount` is an error. (Without this flag,
    /// rules that name an account get the same; the others share ruleop's own role.)
    #[arg(long)]
    pub(super) per_rule: bool,
}

#[derive(Args, Debug)]
pub(super) struct LogArgs {
    /// Log format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "RULEOP_LOG_FORMAT"
    )]
    pub(super) log_format: LogFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub(super) enum LogFormat {
    Text,
    Json,
}

#[derive(Args, Debug)]
pub(super) struct RenderArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    pub(super) rules: Vec<PathBuf>,
    /// The rule to use; by default, the one whose watched resource matches the custom resource's kind.
    #[arg(long)]
    pub(super) rule: Option<String>,
    /// A YAML file with one or more custom resources.
    pub(super) cr: PathBuf,
    /// The namespace of a custom resource that names none (as `kubectl apply -n`).
    #[arg(short, long, default_value = "default")]
    pub(super) namespace: String,
    /// A YAML stream of live children and existing objects (as `kubectl get -o yaml`
    /// prints them): the children are rendered as if those were in the cluster, and the
    /// status they would get is printed on stderr (or to `--status`).
    #[arg(long)]
    pub(super) observed: Option<PathBuf>,
    /// Write the status of each resource (with --observed) to this file instead of stderr.
    #[arg(long, requires = "observed")]
    pub(super) status: Option<PathBuf>,
    /// CRD files (repeat for more): the watched kind's defaults are applied to the custom
    /// resources first, as the API server would.
    #[arg(long)]
    pub(super) crd: Vec<PathBuf>,
    /// Check every rendered object against its kind's schema (built-in kinds): an unknown
    /// field, a value of the wrong type, a missing required field fails the render.
    #[arg(long)]
    pub(super) strict: bool,
}

#[derive(Args, Debug)]
pub(super) struct CheckArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    pub(super) rules: Vec<PathBuf>,
    /// CRD files of the watched kinds (repeat for more): every `spec.…` a rule reads must
    /// be a field of its CRD (or of the rule's `defaults`).
    #[arg(long)]
    pub(super) crd: Vec<PathBuf>,
    /// Also check against the cluster (current kubeconfig): each rule's CRD (from its
    /// `schema`) compared with the one it serves (a change that would break stored
    /// resources is an error), and children of CRD kinds against its `/openapi/v3`.
    #[arg(long)]
    pub(super) against_cluster: bool,
    /// With --against-cluster: custom resources (YAML files, repeat for more) rendered by
    /// their rules, the resource and each child sent as a server-side dry-run apply; what
    /// the API server or its admission webhooks refuse is an error at the template's line.
    #[arg(long, requires = "against_cluster")]
    pub(super) sample: Vec<PathBuf>,
    /// With --against-cluster: check, as `ruleop run`'s webhook does, that this user may
    /// write each rule as a Rule (impersonate its `serviceAccount`, or `escalate` on the
    /// Rule for one with none), asked of the API server (SubjectAccessReviews).
    #[arg(long = "as", value_name = "USER", requires = "against_cluster")]
    pub(super) as_user: Option<String>,
    /// With --as: a group of the user (repeat for more).
    #[arg(long = "as-group", value_name = "GROUP", requires = "as_user")]
    pub(super) as_group: Vec<String>,
    /// Check as `ruleop run --require-identity` would: a rule with no `serviceAccount` is an
    /// error.
    #[arg(long)]
    pub(super) require_identity: bool,
    /// Check as `ruleop run --allow-secret-reads` would: a rule that copies Secret data
    /// out of Secrets is a warning, not an error.
    #[arg(long)]
    pub(super) allow_secret_reads: bool,
    /// Warnings are errors: no rule found is a failure.
    #[arg(long)]
    pub(super) strict: bool,
    /// `text`, or the verdicts as a `json` or `yaml` document.
    #[arg(short, long, value_enum, default_value = "text")]
    pub(super) output: super::output::Output,
}

#[derive(Args, Debug)]
pub(super) struct TraceArgs {
    /// The resource: KIND/NAME (`website/my-blog`; the kind, its plural or
    /// `kind.group`).
    pub(super) resource: String,
    /// Its namespace.
    #[arg(short, long, default_value = "default")]
    pub(super) namespace: String,
    /// The rules files of the kind (default: the cluster's Rule objects).
    #[arg(long)]
    pub(super) rules: Vec<PathBuf>,
    /// `tree` (messages cut to a line), `wide` (whole messages), `json` or `yaml`.
    #[arg(short, long, value_enum, default_value = "tree")]
    pub(super) output: TraceOutput,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TraceOutput {
    Tree,
    Wide,
    Json,
    Yaml,
}
