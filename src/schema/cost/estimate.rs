//! The estimated cost of one CEL expression, computed as the API server computes it when
//! it validates a CRD: a port of cel-go's `checker.Cost` (v0.26, the release Kubernetes
//! 1.36 builds with) with Kubernetes' size estimator and library costs
//! (k8s.io/apiserver/pkg/cel/library/cost.go). The checker's types are inferred here from
//! the schema, enough to pick the overloads whose cost depends on them (string against
//! integer comparison, list against map indexing and membership).

use super::decl::{Decl, Kind, Unbounded};
use super::types::{K, Ty};
use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use std::collections::{BTreeSet, HashMap};

const STRING_TRAVERSAL: f64 = 0.1;
const REGEX_LENGTH: f64 = 0.25;
const LIST_CREATE: u64 = 10;
const MAP_CREATE: u64 = 30;
const STRUCT_CREATE: u64 = 40;

/// A range of sizes or costs, with arithmetic that stops at `u64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Est {
    pub min: u64,
    pub max: u64,
}

impl Est {
    pub const UNKNOWN: Est = Est {
        min: 0,
        max: u64::MAX,
    };

    pub fn fixed(n: u64) -> Est {
        Est { min: n, max: n }
    }

    pub fn add(self, o: Est) -> Est {
        Est {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    pub fn mul(self, o: Est) -> Est {
        Est {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    /// Times a cost factor, rounded up (`MultiplyByCostFactor`).
    pub fn factor(self, f: f64) -> Est {
        let one = |x: u64| {
            let v = (x as f64 * f).ceil();
            if v >= 18_446_744_073_709_551_616.0 {
                u64::MAX
            } else {
                v as u64
            }
        };
        Est {
            min: one(self.min),
            max: one(self.max),
        }
    }

    pub fn union(self, o: Est) -> Est {
        Est {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// The sizes of a list's or a map's entries.
#[derive(Debug, Clone, Copy)]
struct Entry {
    list: bool,
    key: Est,
    val: Est,
}

fn union_entries(a: Option<Entry>, b: Option<Entry>) -> Option<Entry> {
    let (a, b) = (a?, b?);
    Some(Entry {
        list: a.list,
        key: a.key.union(b.key),
        val: a.val.union(b.val),
    })
}

#[derive(Debug, Clone)]
struct Local<'a> {
    path: Vec<String>,
    size: Option<Est>,
    entry: Option<Entry>,
    ty: Ty<'a>,
}

/// What a function's estimator sees of an argument or target (cel-go's `AstNode`).
#[derive(Debug, Clone)]
struct Node<'a> {
    path: Vec<String>,
    ty: Ty<'a>,
    computed: Option<Est>,
    literal_int: Option<i64>,
}

/// Estimates one expression over a schema node's type.
pub(super) struct Estimator<'a> {
    root: &'a Decl,
    paths: HashMap<u64, Vec<String>>,
    sizes: HashMap<u64, Est>,
    entries: HashMap<u64, Entry>,
    types: HashMap<u64, Ty<'a>>,
    locals: HashMap<String, Vec<Local<'a>>>,
    /// The fields whose assumed size entered the estimate for want of a bound.
    pub unbounded: BTreeSet<Unbounded>,
}

impl<'a> Estimator<'a> {
    pub fn new(root: &'a Decl) -> Self {
        Estimator {
            root,
            paths: HashMap::new(),
            sizes: HashMap::new(),
            entries: HashMap::new(),
            types: HashMap::new(),
            locals: HashMap::new(),
            unbounded: BTreeSet::new(),
        }
    }

    /// The cost range of `e`.
    pub fn cost(&mut self, e: &IdedExpr) -> Est {
        let (cost, ty) = match &e.expr {
            Expr::Literal(l) => (Est::fixed(0), literal_type(l)),
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(s) => self.select(e.id, s),
            Expr::Call(c) => return self.call(e, c),
            Expr::List(l) => self.list(e.id, &l.elements),
            Expr::Map(m) => self.map(e.id, &m.entries),
            Expr::Struct(s) => {
                let mut sum = Est::fixed(STRUCT_CREATE);
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        sum = sum.add(self.cost(&f.value));
                    }
                }
                (sum, Ty::Dyn)
            }
            Expr::Comprehension(c) => return self.comprehension(e, c),
            Expr::Unspecified => (Est::default(), Ty::Dyn),
        };
        self.types.insert(e.id, ty);
        cost
    }

    fn ident(&mut self, id: u64, name: &str) -> (Est, Ty<'a>) {
        let ty = match self.locals.get(name).and_then(|s| s.last()) {
            Some(v) => {
                self.paths.insert(id, v.path.clone());
                v.ty.clone()
            }
            None => {
                self.paths.insert(id, vec![name.to_string()]);
                match name {
                    "self" | "oldSelf" => Ty::Decl(self.root),
                    _ => Ty::Dyn,
                }
            }
        };
        (Est::fixed(1), ty)
    }

    fn select(&mut self, id: u64, s: &cel::common::ast::SelectExpr) -> (Est, Ty<'a>) {
        let operand = self.cost(&s.operand);
        if s.test {
            // Kubernetes counts a presence test as free (`PresenceTestHasCost(false)`).
            return (operand, Ty::Bool);
        }
        let on = self.ty(&s.operand);
        let mut sum = operand;
        if matches!(on.kind(), K::Map | K::Struct) {
            sum = sum.add(Est::fixed(1));
        }
        let mut path = self.path(&s.operand);
        path.push(s.field.clone());
        self.paths.insert(id, path);
        (sum, on.field(&s.field))
    }

    fn list(&mut self, id: u64, elements: &[IdedExpr]) -> (Est, Ty<'a>) {
        let mut sum = Est::default();
        let mut item = Est {
            min: if elements.is_empty() { 0 } else { u64::MAX },
            max: 0,
        };
        let mut ty = Ty::Dyn;
        for el in elements {
            sum = sum.add(self.cost(el));
            item = item.union(self.size_or_unknown(el));
            if matches!(ty, Ty::Dyn) {
                ty = self.ty(el);
            }
        }
        self.entries.insert(
            id,
            Entry {
                list: true,
                key: Est::fixed(1),
                val: item,
            },
        );
        (sum.add(Est::fixed(LIST_CREATE)), Ty::List(Box::new(ty)))
    }

    fn map(&mut self, id: u64, entries: &[cel::common::ast::IdedEntryExpr]) -> (Est, Ty<'a>) {
        let mut sum = Est::default();
        let empty = if entries.is_empty() { 0 } else { u64::MAX };
        let (mut key, mut val) = (Est { min: empty, max: 0 }, Est { min: empty, max: 0 });
        let mut ty = Ty::Dyn;
        for entry in entries {
            if let EntryExpr::MapEntry(m) = &entry.expr {
                sum = sum.add(self.cost(&m.key)).add(self.cost(&m.value));
                key = key.union(self.size_or_unknown(&m.key));
                val = val.union(self.size_or_unknown(&m.value));
                ty = self.ty(&m.value);
            }
        }
        self.entries.insert(
            id,
            Entry {
                list: false,
                key,
                val,
            },
        );
        let ty = Ty::Map(Box::new(Ty::String), Box::new(ty));
        (sum.add(Est::fixed(MAP_CREATE)), ty)
    }

    fn comprehension(&mut self, e: &IdedExpr, c: &ComprehensionExpr) -> Est {
        let mut sum = self.cost(&c.iter_range).add(self.cost(&c.accu_init));
        let accu_ty = self.ty(&c.accu_init);
        self.push_local(&c.accu_var, &c.accu_init, accu_ty);
        let range_ty = self.ty(&c.iter_range);
        let entry = self.entry(&c.iter_range);
        let list = match entry {
            Some(en) => en.list,
            None => range_ty.kind() == K::List,
        };
        let range_path = self.path(&c.iter_range);
        let with = |sub: &str| {
            let mut p = range_path.clone();
            p.push(sub.to_string());
            p
        };
        match &c.iter_var2 {
            Some(v2) => {
                let (kp, vp) = if list {
                    ("@indices", "@items")
                } else {
                    ("@keys", "@values")
                };
                let key_ty = if list { Ty::Int } else { range_ty.key() };
                self.push(&c.iter_var, with(kp), entry.map(|e| e.key), None, key_ty);
                self.push(v2, with(vp), entry.map(|e| e.val), None, range_ty.elem());
            }
            None => {
                let (sub, size, ty) = if list {
                    ("@items", entry.map(|e| e.val), range_ty.elem())
                } else {
                    ("@keys", entry.map(|e| e.key), range_ty.key())
                };
                self.push(&c.iter_var, with(sub), size, None, ty);
            }
        }
        let loop_cost = self.cost(&c.loop_cond);
        let step_cost = self.cost(&c.loop_step);
        let step_ty = self.ty(&c.loop_step);
        self.pop(&c.iter_var);
        if let Some(v2) = &c.iter_var2 {
            self.pop(v2);
        }
        if let Some(accu) = self.locals.get_mut(&c.accu_var).and_then(|s| s.last_mut())
            && !matches!(step_ty.kind(), K::Dyn)
        {
            accu.ty = step_ty;
        }
        sum = sum.add(self.cost(&c.result));
        let ty = self.ty(&c.result);
        self.pop(&c.accu_var);
        let range = self.size_or_unknown(&c.iter_range);
        sum = sum.add(range.mul(step_cost.add(loop_cost)));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(s) = self.compute_size(&c.accu_init) {
                    self.sizes.insert(e.id, s);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.sizes.insert(e.id, range);
                if let Some(en) = self.entry(&c.loop_step) {
                    self.entries.insert(e.id, en);
                }
            }
            _ => {}
        }
        self.types.insert(e.id, ty);
        sum
    }

    fn call(&mut self, e: &IdedExpr, c: &CallExpr) -> Est {
        if c.func_name == "dyn" && c.target.is_none() && c.args.len() == 1 {
            let arg = self.cost(&c.args[0]);
            self.copy_sizes(e.id, &c.args[0]);
            let ty = self.ty(&c.args[0]);
            self.types.insert(e.id, ty);
            return Est::fixed(1).add(arg);
        }
        if let Some(cost) = self.bind(e, c) {
            return cost;
        }
        let mut arg_costs = Vec::with_capacity(c.args.len());
        let mut args = Vec::with_capacity(c.args.len());
        for a in &c.args {
            arg_costs.push(self.cost(a));
            args.push(self.node(a));
        }
        let mut sum = Est::default();
        let target = c.target.as_deref().map(|t| {
            sum = sum.add(self.cost(t));
            self.node(t)
        });
        let arg_tys: Vec<Ty<'a>> = args.iter().map(|a| a.ty.clone()).collect();
        let ty = super::types::result(&c.func_name, target.as_ref().map(|t| &t.ty), &arg_tys);
        self.types.insert(e.id, ty);
        let (cost, mut size) = self.function(e, c, target.as_ref(), &args, &arg_costs);
        if c.func_name == "_[_]" && c.target.is_none() && c.args.len() == 2 {
            size = self.entry(&c.args[0]).map(|en| en.val);
            let sub = match args[0].ty.kind() {
                K::List => "@items",
                _ => "@values",
            };
            let mut path = self.path(&c.args[0]);
            path.push(sub.to_string());
            self.paths.insert(e.id, path);
        }
        let size = size.or_else(|| self.compute_size(e));
        if let Some(s) = size {
            self.sizes.insert(e.id, s);
        }
        sum.add(cost)
    }

    /// `cel.bind(name, init, result)`: the cost of its (empty) range, of `init` and of
    /// `result` with `name` bound.
    fn bind(&mut self, e: &IdedExpr, c: &CallExpr) -> Option<Est> {
        let target = c.target.as_deref()?;
        if c.func_name != "bind" || c.args.len() != 3 || target.expr != Expr::Ident("cel".into()) {
            return None;
        }
        let Expr::Ident(name) = &c.args[0].expr else {
            return None;
        };
        let mut sum = Est::fixed(LIST_CREATE).add(self.cost(&c.args[1]));
        let ty = self.ty(&c.args[1]);
        self.push_local(name, &c.args[1], ty);
        sum = sum.add(self.cost(&c.args[2]));
        self.pop(name);
        self.copy_sizes(e.id, &c.args[2]);
        let ty = self.ty(&c.args[2]);
        self.types.insert(e.id, ty);
        Some(sum)
    }

    /// A function's own cost (its arguments' included) and its result's size.
    fn function(
        &mut self,
        e: &IdedExpr,
        c: &CallExpr,
        target: Option<&Node<'a>>,
        args: &[Node<'a>],
        costs: &[Est],
    ) -> (Est, Option<Est>) {
        let arg_sum = costs.iter().fold(Est::default(), |s, c| s.add(*c));
        if let Some((cost, size)) = self.library(&c.func_name, target, args) {
            return (cost.add(arg_sum), size);
        }
        let size = |n: &Node<'_>| n.computed.unwrap_or(Est::UNKNOWN);
        let name = c.func_name.as_str();
        let kind0 = args.first().map(|a| a.ty.kind());
        match (name, target, args.len()) {
            ("format", Some(t), _) => (size(t).factor(STRING_TRAVERSAL).add(arg_sum), None),
            ("bytes", None, 1) if kind0 == Some(K::String) => {
                let sz = size(&args[0]);
                let r = Est {
                    min: sz.min,
                    max: sz.max.saturating_mul(4),
                };
                (sz.factor(STRING_TRAVERSAL).add(arg_sum), Some(r))
            }
            ("string", None, 1) if kind0 == Some(K::Bytes) => {
                let sz = size(&args[0]);
                let r = Est {
                    min: sz.min / 4,
                    max: sz.max,
                };
                (sz.factor(STRING_TRAVERSAL).add(arg_sum), Some(r))
            }
            ("strings.quote", None, 1) => {
                let sz = size(&args[0]);
                let r = Est {
                    min: sz.min.saturating_add(2),
                    max: sz.max.saturating_mul(2).saturating_add(2),
                };
                (sz.factor(STRING_TRAVERSAL).add(arg_sum), Some(r))
            }
            ("startsWith" | "endsWith", Some(_), 1) => {
                (size(&args[0]).factor(STRING_TRAVERSAL).add(arg_sum), None)
            }
            ("@in", None, 2) if args[1].ty.kind() != K::Map => {
                (size(&args[1]).factor(1.0).add(arg_sum), None)
            }
            ("matches", Some(t), 1) => {
                let s = size(t).add(Est::fixed(1)).factor(STRING_TRAVERSAL);
                let r = size(&args[0]).factor(REGEX_LENGTH);
                (s.mul(r).add(arg_sum), None)
            }
            ("contains", Some(t), 1) if t.ty.kind() != K::List => {
                let s = size(t).factor(STRING_TRAVERSAL);
                let sub = size(&args[0]).factor(STRING_TRAVERSAL);
                (s.mul(sub).add(arg_sum), None)
            }
            ("_&&_" | "_||_", None, 2) => (
                Est {
                    min: costs[0].min,
                    max: costs[0].add(costs[1]).max,
                },
                None,
            ),
            ("_?_:_", None, 3) => {
                let r = size(&args[1]).union(size(&args[2]));
                let en = union_entries(self.entry(&c.args[1]), self.entry(&c.args[2]));
                if let Some(en) = en {
                    self.entries.insert(e.id, en);
                }
                (costs[0].add(costs[1].union(costs[2])), Some(r))
            }
            ("_+_", None, 2) if matches!(kind0, Some(K::String | K::Bytes | K::List)) => {
                let r = size(&args[0]).add(size(&args[1]));
                let en = union_entries(self.entry(&c.args[0]), self.entry(&c.args[1]));
                if let Some(en) = en {
                    self.entries.insert(e.id, en);
                }
                match kind0 {
                    Some(K::List) => (Est::fixed(1).add(arg_sum), Some(r)),
                    _ => (r.factor(STRING_TRAVERSAL).add(arg_sum), Some(r)),
                }
            }
            ("_<_" | "_>_" | "_<=_" | "_>=_", None, 2)
                if matches!(kind0, Some(K::String | K::Bytes)) =>
            {
                (compare(size(&args[0]), size(&args[1])).add(arg_sum), None)
            }
            ("_==_" | "_!=_", None, 2) => {
                (compare(size(&args[0]), size(&args[1])).add(arg_sum), None)
            }
            ("sets.contains" | "sets.intersects" | "sets.equivalent", None, 2) => {
                let f = if name == "sets.equivalent" { 2.0 } else { 1.0 };
                let c = self
                    .size_estimate(&args[0])
                    .mul(self.size_estimate(&args[1]));
                (c.factor(f).add(Est::fixed(1)).add(arg_sum), None)
            }
            _ => (Est::fixed(1).add(arg_sum), None),
        }
    }

    /// The Kubernetes library's estimates (`library.CostEstimator.EstimateCallCost`),
    /// before cel-go's own.
    fn library(
        &mut self,
        name: &str,
        target: Option<&Node<'a>>,
        args: &[Node<'a>],
    ) -> Option<(Est, Option<Est>)> {
        let one = Some((Est::fixed(1), None));
        let traversal = |s: Est| s.factor(STRING_TRAVERSAL);
        match name {
            "isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf" => {
                let t = target?;
                let sz = self.size_estimate(t);
                if t.ty.kind() == K::List {
                    let el = self.items_node(t);
                    let mut el_cost = Est::fixed(1);
                    if matches!(el.ty.kind(), K::String | K::Bytes) {
                        el_cost = el_cost.add(traversal(self.size_estimate(&el)));
                    }
                    Some((sz.mul(el_cost), None))
                } else {
                    Some((traversal(sz), None))
                }
            }
            "url" | "jsonpatch.escapeKey" if args.len() == 1 => {
                let sz = self.size_estimate(&args[0]);
                Some((traversal(sz), Some(sz)))
            }
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let sz = self.size_estimate(target?);
                Some((traversal(sz), Some(sz)))
            }
            "replace" if target.is_some() && args.len() >= 2 => {
                let sz = self.size_estimate(target?);
                let r = replaced(
                    sz,
                    self.size_estimate(&args[0]),
                    self.size_estimate(&args[1]),
                );
                Some((sz.factor(2.0 * STRING_TRAVERSAL), Some(r)))
            }
            "split" => {
                let sz = self.size_estimate(target?);
                let max = match args.get(1).and_then(|a| a.literal_int) {
                    Some(i) => i as u64,
                    None => sz.max,
                };
                Some((sz.factor(2.0 * STRING_TRAVERSAL), Some(Est { min: 0, max })))
            }
            "join" => {
                let t = target?;
                let list = self.size_estimate(t);
                let mut sz = Est::default();
                if t.ty.kind() == K::List {
                    let el = self.items_node(t);
                    sz = list.mul(self.size_estimate(&el));
                }
                if let Some(sep) = args.first() {
                    let seps = Est {
                        min: list.min.saturating_sub(1),
                        max: list.max.saturating_sub(1),
                    };
                    sz = sz.add(self.size_estimate(sep).mul(seps));
                }
                Some((traversal(sz), Some(sz)))
            }
            "find" | "findAll" if target.is_some() && !args.is_empty() => {
                let sz = self.size_estimate(target?);
                let s = traversal(sz.add(Est::fixed(1)));
                let r = self.size_estimate(&args[0]).factor(REGEX_LENGTH);
                Some((
                    s.mul(r),
                    Some(Est {
                        min: 0,
                        max: sz.max,
                    }),
                ))
            }
            "cidr" | "isIP" | "isCIDR" | "quantity" | "isQuantity" | "semver" | "isSemver"
                if !args.is_empty() =>
            {
                Some((traversal(self.size_estimate(&args[0])), None))
            }
            "ip" if !args.is_empty() => Some((traversal(self.size_estimate(&args[0])), None)),
            "ip" => one,
            "ip.isCanonical" if !args.is_empty() => Some((
                self.size_estimate(&args[0]).factor(2.0 * STRING_TRAVERSAL),
                None,
            )),
            "containsIP" | "containsCIDR" if target.is_some() && !args.is_empty() => {
                let ip = Est { min: 4, max: 16 };
                let mut c = traversal(ip.add(ip));
                if name == "containsCIDR" {
                    c = c.add(traversal(ip)).add(Est::fixed(1));
                }
                if args[0].ty.kind() == K::String {
                    c = c.add(traversal(self.size_estimate(&args[0])));
                }
                Some((c, None))
            }
            "validate" if target.is_some() && !args.is_empty() => {
                // `MaxNameFormatRegexSize` (128) regular-expression characters.
                let s = traversal(self.size_estimate(&args[0]));
                Some((s.factor(128.0 * REGEX_LENGTH), None))
            }
            "masked"
            | "prefixLength"
            | "family"
            | "isUnspecified"
            | "isLoopback"
            | "isLinkLocalMulticast"
            | "isLinkLocalUnicast"
            | "isGlobalUnicast"
            | "format.named"
            | "sign"
            | "asInteger"
            | "isInteger"
            | "asApproximateFloat"
            | "isGreaterThan"
            | "isLessThan"
            | "compareTo"
            | "add"
            | "sub"
            | "major"
            | "minor"
            | "patch"
            | "getScheme"
            | "getHostname"
            | "getHost"
            | "getPort"
            | "getEscapedPath"
            | "getQuery" => one,
            "_==_" if args.len() == 2 && args[0].ty.kind() == K::Opaque => one,
            _ => None,
        }
    }

    /// A list's items as a node of their own (`listElementNode`).
    fn items_node(&self, list: &Node<'a>) -> Node<'a> {
        let mut path = list.path.clone();
        if !path.is_empty() {
            path.push("@items".into());
        }
        Node {
            path,
            ty: list.ty.elem(),
            computed: None,
            literal_int: None,
        }
    }

    /// The library's `sizeEstimate`: computed, else from the schema, else unknown.
    fn size_estimate(&mut self, n: &Node<'a>) -> Est {
        n.computed
            .or_else(|| self.schema_size(&n.path))
            .unwrap_or(Est::UNKNOWN)
    }

    fn node(&mut self, e: &IdedExpr) -> Node<'a> {
        let mut path = self.path(e);
        if path
            .first()
            .is_some_and(|p| p == "@result" || p == "__result__")
        {
            path.clear();
        }
        let literal_int = match &e.expr {
            Expr::Literal(LiteralValue::Int(i)) => Some(*i.inner()),
            _ => None,
        };
        Node {
            path,
            ty: self.ty(e),
            computed: self.compute_size(e),
            literal_int,
        }
    }

    fn ty(&self, e: &IdedExpr) -> Ty<'a> {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Dyn)
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(v) = self.locals.get(name).and_then(|s| s.last())
        {
            return v.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    fn entry(&self, e: &IdedExpr) -> Option<Entry> {
        if let Some(en) = self.entries.get(&e.id) {
            return Some(*en);
        }
        match &e.expr {
            Expr::Ident(name) => self.locals.get(name)?.last()?.entry,
            _ => None,
        }
    }

    fn push(
        &mut self,
        name: &str,
        path: Vec<String>,
        size: Option<Est>,
        entry: Option<Entry>,
        ty: Ty<'a>,
    ) {
        let local = Local {
            path,
            size,
            entry,
            ty,
        };
        self.locals.entry(name.to_string()).or_default().push(local);
    }

    fn push_local(&mut self, name: &str, e: &IdedExpr, ty: Ty<'a>) {
        let path = self.path(e);
        let entry = self.entry(e);
        let size = self.compute_size(e);
        self.push(name, path, size, entry, ty);
    }

    fn pop(&mut self, name: &str) {
        if let Some(s) = self.locals.get_mut(name) {
            s.pop();
        }
    }

    fn copy_sizes(&mut self, dst: u64, src: &IdedExpr) {
        if let Some(s) = self.compute_size(src) {
            self.sizes.insert(dst, s);
        }
        if let Some(en) = self.entry(src) {
            self.entries.insert(dst, en);
        }
    }

    fn size_or_unknown(&mut self, e: &IdedExpr) -> Est {
        self.compute_size(e).unwrap_or(Est::UNKNOWN)
    }

    /// `computeSize`: as computed, a literal's, the schema's, a scalar's 1, a variable's.
    fn compute_size(&mut self, e: &IdedExpr) -> Option<Est> {
        if let Some(s) = self.sizes.get(&e.id) {
            return Some(*s);
        }
        if let Some(s) = literal_size(&e.expr) {
            return Some(s);
        }
        let path = self.path(e);
        if let Some(s) = self.schema_size(&path) {
            self.sizes.insert(e.id, s);
            return Some(s);
        }
        if self.ty(e).is_scalar() {
            return Some(Est::fixed(1));
        }
        match &e.expr {
            Expr::Ident(name) => self.locals.get(name)?.last()?.size,
            _ => None,
        }
    }

    /// Kubernetes' size estimator: the node the path leads to from the rule's own node
    /// (its first step, the variable, left out), as large as its bound allows.
    fn schema_size(&mut self, path: &[String]) -> Option<Est> {
        if path.is_empty() {
            return None;
        }
        let mut node = self.root;
        let key = Decl::key();
        for step in &path[1..] {
            node = match step.as_str() {
                "@items" | "@values" => node.elem.as_deref()?,
                // A map's keys: a string the API server sizes as 0.
                "@keys" if node.kind == Kind::Map => return Some(Est::fixed(key.max_elements)),
                field => node.fields.get(field)?,
            };
        }
        if let Some(u) = &node.unbounded {
            self.unbounded.insert(u.clone());
        }
        Some(Est {
            min: 0,
            max: node.max_elements,
        })
    }
}

/// The cost of comparing two strings or any two values (`Equals`, `LessString`...).
fn compare(lhs: Est, rhs: Est) -> Est {
    let smallest = lhs.max.min(rhs.max);
    let min = u64::from(smallest > 0);
    Est { min, max: smallest }.factor(STRING_TRAVERSAL)
}

/// The size of `replace`'s result (the library's bounds on how many replacements).
fn replaced(sz: Est, from: Est, with: Est) -> Est {
    let (mut count, mut kept) = (Est::default(), Est::default());
    if from.min == 0 {
        count.max = if sz.max < u64::MAX {
            sz.max + 1
        } else {
            sz.max
        };
        kept.max = sz.max;
    } else if with.max <= from.min {
        kept.max = sz.max;
    } else {
        count.max = (sz.max as f64 / from.min as f64).ceil() as u64;
    }
    if from.max == 0 {
        count.min = if sz.min < u64::MAX {
            sz.min + 1
        } else {
            sz.min
        };
        kept.min = sz.min;
    } else if from.max <= with.min {
        kept.min = sz.min;
    } else {
        count.min = (sz.min as f64 / from.max as f64).ceil() as u64;
    }
    count.mul(with).add(kept)
}

fn literal_size(e: &Expr) -> Option<Est> {
    let n = match e {
        Expr::Literal(LiteralValue::String(s)) => s.inner().chars().count() as u64,
        Expr::Literal(LiteralValue::Bytes(b)) => b.inner().len() as u64,
        Expr::Literal(_) => 1,
        Expr::List(l) => l.elements.len() as u64,
        Expr::Map(m) => m.entries.len() as u64,
        _ => return None,
    };
    Some(Est::fixed(n))
}

fn literal_type<'a>(l: &LiteralValue) -> Ty<'a> {
    match l {
        LiteralValue::Boolean(_) => Ty::Bool,
        LiteralValue::Bytes(_) => Ty::Bytes,
        LiteralValue::Double(_) => Ty::Double,
        LiteralValue::Int(_) => Ty::Int,
        LiteralValue::Null => Ty::Null,
        LiteralValue::String(_) => Ty::String,
        LiteralValue::UInt(_) => Ty::Uint,
    }
}
