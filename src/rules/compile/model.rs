//! What a compiled rule is made of: the rule, its children and existing objects, the
//! template trees and the status fields, as `render` and `status` evaluate them.

use crate::rules::error::Location;
use crate::rules::graph::Reads;
use crate::rules::program::{ExprRef, Program, TextRef};
use crate::rules::spec::{DeletionPolicy, FieldType, WatchSpec};
use crate::schema::kinds::group_version;
use jsonpath_rust::parser::model::JpQuery;
use serde_json::{Map, Value};
use std::sync::Arc;

/// A rule ready to run: what `render` and `status` evaluate for every custom resource.
#[derive(Debug)]
pub struct CompiledRule {
    pub name: String,
    pub at: Location,
    pub watch: WatchSpec,
    pub defaults: Map<String, Value>,
    pub children: Vec<CompiledChild>,
    pub fields: Vec<CompiledField>,
    pub ready: Option<ExprRef>,
    pub program: Program,
    /// The variables the status expressions read (`children` and `self` are made into
    /// template values only when some expression reads them).
    pub status_reads: std::collections::BTreeSet<String>,
    /// Changes whenever anything in the rule changes; tells edited rules on reload.
    pub fingerprint: String,
    /// Objects the rule reads but does not make.
    pub existing: Vec<CompiledExisting>,
    /// The order children are rendered in: each after the ones it depends on.
    pub order: Vec<usize>,
    /// For each child, the children it depends on (reads or comes `after`).
    pub deps: Vec<std::collections::BTreeSet<usize>>,
    pub deletion: DeletionPolicy,
    /// The watched kind's CRD, made from the rule's `schema` (None without one).
    pub crd: Option<Value>,
    /// How a new revision reaches the resources (Rule objects only).
    pub rollout: Option<super::rollout::Rollout>,
    /// How many revisions of a Rule object are kept.
    pub history_limit: usize,
    /// Whether a resource's `ruleop.dev/revision` is honoured.
    pub pins: crate::rules::spec::Pins,
    /// The Rule object the rule came from; None for a rule from a file.
    pub object: Option<ObjectSource>,
    /// The ServiceAccount the rule runs as; None: ruleop's own account.
    pub identity: Option<Identity>,
    /// How the kind's versions convert, when it has more than one.
    pub conversion: Option<super::versions::Conversion>,
}

impl CompiledRule {
    /// The name of the watched kind's CRD (`<plural>.<group>`), when the rule makes one.
    pub fn crd_name(&self) -> Option<&str> {
        self.crd.as_ref()?["metadata"]["name"].as_str()
    }

    /// The watched kind, as the CRD the rule makes names it.
    pub fn crd_kind(&self) -> Option<&str> {
        self.crd.as_ref()?["spec"]["names"]["kind"].as_str()
    }
}

/// The ServiceAccount a rule runs as (`serviceAccount`), its name and namespace checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    pub name: String,
    pub namespace: String,
}

impl Identity {
    /// The user name the API server knows the account by.
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The Rule object (cluster-scoped, `ruleop.dev`) a rule came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSource {
    pub uid: String,
    /// Its generation (0: a revision read back from the cluster, standing in while no
    /// generation of the Rule loads).
    pub generation: i64,
    /// Its `metadata.creationTimestamp` (orders a Rule made again under the same name).
    pub created: String,
    /// Its `spec`, as the Rule holds it (kept as a revision).
    pub spec: Arc<Value>,
    /// Its `status.rollout` when it was loaded (where a rollout stood).
    pub rollout: Option<Value>,
}

/// One child template.
#[derive(Debug)]
pub struct CompiledChild {
    pub id: String,
    pub api_version: String,
    pub kind: String,
    pub when: Option<ExprRef>,
    pub template: Node,
    /// Which existing objects of its name the child may take over.
    pub adopt: crate::rules::spec::AdoptPolicy,
    /// What becomes of its objects when they leave the rule.
    pub on_remove: crate::rules::spec::OnRemove,
    /// When the live child is ready (it sees `child`); None: its kind's built-in readiness.
    pub ready_when: Option<ExprRef>,
    /// A collection: one object per item of this list.
    pub each: Option<Each>,
    /// Children that must exist and be ready first (indexes into the rule's children).
    pub after: Vec<usize>,
    /// What its templates read of other children and existing objects.
    pub reads: Reads,
    /// Whether its `when` itself reads other children or existing objects (then it can
    /// only be decided once they are there).
    pub when_reads_graph: bool,
    pub at: Location,
}

/// A repetition: `over` gives a list; each item is bound to `var`, its position to `index`.
#[derive(Debug)]
pub struct Each {
    pub over: ExprRef,
    pub var: Arc<str>,
}

/// An object the rule reads (`existing[]`): by name, or by labels.
#[derive(Debug)]
pub struct CompiledExisting {
    pub id: String,
    pub api_version: String,
    pub kind: String,
    pub find: Find,
    pub at: Location,
}

/// How an existing object is found.
#[derive(Debug)]
pub enum Find {
    /// One object by name (a template node giving a string).
    Name(Node),
    /// Every object with these labels (values are template nodes).
    Selector(Vec<(String, Node)>),
}

impl CompiledExisting {
    /// The API group of its kind (empty for the core group).
    pub fn group(&self) -> &str {
        group_version(&self.api_version).0
    }
}

impl CompiledChild {
    /// The API group of the child's kind (empty for the core group).
    pub fn group(&self) -> &str {
        group_version(&self.api_version).0
    }
}

/// A node of a structured template. Only string scalars are templated, each on its own,
/// so nothing a custom resource holds can change the shape of a child.
#[derive(Debug)]
pub enum Node {
    /// A value written as is.
    Literal(Value),
    /// A lone `{{ expr }}`: the expression's value, with its own type.
    Expr(ExprRef),
    /// Text with templates in it: always a string.
    Text(TextRef),
    Map(Vec<(Key, Node)>),
    Seq(Vec<Node>),
    /// An entry of a list repeated once per item (only inside [`Node::Seq`]).
    Each(Box<(Each, Node)>),
}

/// A mapping key: literal or templated text.
#[derive(Debug)]
pub enum Key {
    Literal(String),
    Text(TextRef),
}

/// One status field.
#[derive(Debug)]
pub struct CompiledField {
    pub name: String,
    pub source: FieldSource,
    pub ty: FieldType,
    pub default: Option<Value>,
    pub export: bool,
    pub at: Location,
}

/// Where a status field's value comes from.
#[derive(Debug)]
pub enum FieldSource {
    /// A JSONPath over the custom resource itself (`from: self`) or a child.
    Path {
        from: Source,
        query: Box<JpQuery>,
        text: String,
    },
    /// An expression.
    Value(ExprRef),
}

/// The object a JSONPath reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Parent,
    /// Index into [`CompiledRule::children`].
    Child(usize),
}
